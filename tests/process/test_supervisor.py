"""`bloom up`'s process supervision, with small shell and Python children: order, readiness,
prefixed output, failures with their last lines, stopping whole process groups, and stopping
everything when the output pipe breaks."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bloom.cli.supervisor import (
    ChildFailed,
    ChildSpec,
    StopRequested,
    Supervisor,
    describe_exit,
    http_ready,
    port_in_use,
    prefix,
)
from tests.support.net import closed_port, free_port


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def spec(name: str, script: str, ready=lambda: True, timeout: float = 10.0) -> ChildSpec:
    return ChildSpec(name, sh(script), dict(os.environ), ready, ready_timeout_sec=timeout)


def trapping(marker: Path, on_term: str, name: str = "stubborn") -> ChildSpec:
    """A shell that runs `on_term` on SIGTERM (nothing: ignores it); ready once the trap is set."""
    script = f"trap '{on_term}' TERM; touch {marker}; while true; do sleep 0.05; done"
    return spec(name, script, ready=marker.exists)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def messages() -> list[str]:
    return []


@pytest.fixture
def supervisor(messages: list[str]):
    sup = Supervisor(say=messages.append, stop_grace_sec=2.0, poll_sec=0.02)
    yield sup
    sup.stop_all()


def test_prefix_is_fixed_width():
    assert prefix("membridge") == "membridge |"
    assert prefix("runtime") == "runtime   |"
    assert prefix("worker") == "worker    |"
    assert prefix("model") == "model     |"


def test_children_start_in_order_each_ready_before_the_next(supervisor, tmp_path, capsys):
    marker = tmp_path / "first-ready"
    first = spec("first", f"sleep 0.3; touch {marker}; exec sleep 60", ready=marker.exists)
    # The second one checks that the first was ready before it started.
    second = spec("second", f"test -e {marker} && echo saw it; exec sleep 60")
    supervisor.start(first)
    supervisor.start(second)
    seen: list[str] = []

    def saw_it() -> bool:
        seen.extend(capsys.readouterr().out.splitlines())
        return "second    | saw it" in seen

    wait_for(saw_it)


def test_output_lines_carry_the_childs_name(supervisor, capsys):
    supervisor.start(spec("runtime", "echo one; echo two >&2; exec sleep 60"))
    lines: list[str] = []

    def both() -> bool:
        lines.extend(capsys.readouterr().out.splitlines())
        return "runtime   | two" in lines

    wait_for(both)
    assert "runtime   | one" in lines


def test_a_child_that_exits_before_ready_fails_with_its_last_lines(supervisor):
    with pytest.raises(ChildFailed) as failed:
        supervisor.start(spec("membridge", "echo line 1; echo 'bad setting' >&2; exit 3",
                              ready=lambda: False))  # fmt: skip
    assert failed.value.name == "membridge"
    assert str(failed.value) == "membridge exited with status 3 before it was ready"
    assert failed.value.tail == ["line 1", "bad setting"]


def test_a_child_not_ready_in_time_fails_and_is_stopped(supervisor):
    with pytest.raises(ChildFailed) as failed:
        supervisor.start(spec("slow", "echo starting; exec sleep 60", lambda: False, 0.5))
    assert str(failed.value) == "slow was not ready after 0.5 s"
    assert failed.value.tail == ["starting"]
    (child,) = supervisor.children
    supervisor.stop_all()
    assert gone(child.pid)


def test_stop_all_stops_in_reverse_order(supervisor, messages, tmp_path):
    log = tmp_path / "stops"
    for name in ("a", "b", "c"):
        supervisor.start(trapping(tmp_path / name, f"echo {name} >> {log}; exit 0", name))
    supervisor.stop_all()
    assert log.read_text().split() == ["c", "b", "a"]
    assert all(gone(child.pid) for child in supervisor.children)
    stopping = [m for m in messages if "stopping" in m]
    assert ["stopping c" in stopping[0], "stopping a" in stopping[2]] == [True, True]


def test_a_child_ignoring_sigterm_is_killed_after_the_grace(messages, tmp_path):
    sup = Supervisor(say=messages.append, stop_grace_sec=0.5, poll_sec=0.02)
    child = sup.start(trapping(tmp_path / "trapped", ""))
    started = time.monotonic()
    sup.stop_all()
    assert 0.4 < time.monotonic() - started < 5
    assert gone(child.pid)
    assert describe_exit(child) == "was killed by signal SIGKILL"
    assert any("did not stop in 0.5 s: killing it" in m for m in messages)


def test_stopping_a_child_kills_its_whole_process_group(supervisor, tmp_path):
    pidfile = tmp_path / "grandchild"
    child = supervisor.start(spec("parent", f"sleep 60 & echo $! > {pidfile}; wait",
                                  ready=pidfile.exists))  # fmt: skip
    wait_for(lambda: pidfile.read_text().strip() != "")
    grandchild = int(pidfile.read_text())
    assert os.getpgid(grandchild) == child.pid
    supervisor.stop(child)
    wait_for(lambda: gone(grandchild))
    assert group_gone(child.pid)


def test_wait_returns_the_child_that_died(supervisor):
    supervisor.start(spec("steady", "exec sleep 60"))
    dying = supervisor.start(spec("dying", "sleep 0.3; echo bye; exit 4"))
    assert supervisor.wait() is dying
    assert describe_exit(dying) == "exited with status 4"
    assert list(dying.tail) == ["bye"]


def test_wait_returns_none_when_a_stop_is_requested(supervisor):
    supervisor.start(spec("steady", "exec sleep 60"))
    threading.Timer(0.2, supervisor.request_stop).start()
    assert supervisor.wait() is None


def test_a_stop_request_while_starting_interrupts_the_start(supervisor):
    threading.Timer(0.3, supervisor.request_stop).start()
    with pytest.raises(StopRequested):
        supervisor.start(spec("never-ready", "exec sleep 60", lambda: False, 30))
    with pytest.raises(StopRequested):
        supervisor.start(spec("next", "exec sleep 60"))
    assert len(supervisor.children) == 1


def test_a_second_stop_request_skips_the_grace(messages, tmp_path):
    sup = Supervisor(say=messages.append, stop_grace_sec=30, poll_sec=0.02)
    child = sup.start(trapping(tmp_path / "trapped", ""))
    sup.request_stop()
    sup.request_stop()  # the same Ctrl-C, delivered twice (make, uv run): no hurry
    assert not sup.hurry.is_set()
    threading.Timer(1.5, sup.request_stop).start()
    started = time.monotonic()
    sup.stop_all()
    assert 1.0 < time.monotonic() - started < 6
    assert gone(child.pid)
    assert "killing stubborn (asked twice)" in messages


def test_signals_request_a_stop_inside_the_block(supervisor):
    before = signal.getsignal(signal.SIGTERM)
    with supervisor.signals():
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(supervisor.stopping.is_set)
    assert signal.getsignal(signal.SIGTERM) == before


def test_children_run_as_python_modules(supervisor, capsys):
    argv = [sys.executable, "-m", "bloom.cli.main", "version"]
    child = supervisor.start(ChildSpec("version", argv, dict(os.environ), lambda: True))
    wait_for(lambda: child.exited() is not None, 60)
    child.wait_output()
    assert child.exited() == 0
    assert "version   | 0." in capsys.readouterr().out


def test_readiness_helpers():
    port = closed_port()
    assert http_ready(f"http://127.0.0.1:{port}/health", timeout_sec=0.5)() is False
    assert port_in_use(port) is False
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert port_in_use(sock.getsockname()[1]) is True


STACK = """
import os, sys
from pathlib import Path
from bloom.cli.supervisor import ChildSpec, http_ready
from bloom.cli.up import UpOptions, run_stack

ports = [int(port) for port in sys.argv[1:]]
children = [
    ChildSpec(
        f"model{n}",
        [sys.executable, "-m", "bloom.cli.main", "echo-model", "serve", "--port", str(port)],
        dict(os.environ),
        http_ready(f"http://127.0.0.1:{port}/_requests"),
    )
    for n, port in enumerate(ports)
]
sys.exit(run_stack(UpOptions(data_dir=Path(".")), children))
"""


def stack_of_echo_models(
    tmp_path: Path, ports: list[int]
) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """`bloom up`'s `run_stack` over echo models, its stdout and stderr on one pipe (as
    `2>&1 | tee`), read up to the banner; the process and its children's pids."""
    script = tmp_path / "stack.py"
    script.write_text(STACK)
    process = subprocess.Popen(
        [sys.executable, str(script), *map(str, ports)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    lines: list[str] = []
    while not any("BLOOM is up" in line for line in lines):
        line = process.stdout.readline()
        assert line, "the stack ended before it was up:\n" + "".join(lines)
        lines.append(line)
    found = (re.search(r"started (\w+) \(pid (\d+)\)", line) for line in lines)
    return process, {m.group(1): int(m.group(2)) for m in found if m}


@pytest.mark.parametrize("then", ["a line to write", "Ctrl-C"])
def test_a_closed_output_pipe_stops_every_child_and_the_supervisor(tmp_path, then):
    """`make demo 2>&1 | tee demo.log`, and tee gone (Ctrl-C reaches it too): the next line the
    supervisor writes (a child's access log line, or its own `stopping …`) fails, and it stops
    every child, rather than dying with them left running."""
    ports = [free_port()]  # one child: each takes seconds to start
    process, children = stack_of_echo_models(tmp_path, ports)
    try:
        assert set(children) == {"model0"}
        assert process.stdout is not None
        process.stdout.close()
        if then == "Ctrl-C":
            process.send_signal(signal.SIGINT)
        else:  # the model logs the request (not a routine one); refused when a line it wrote
            # first already did it, cut off when the stop comes while it answers
            with contextlib.suppress(httpx.ConnectError, httpx.RemoteProtocolError):
                httpx.get(f"http://127.0.0.1:{ports[0]}/not-a-model-path")
        assert process.wait(30) == 0
        wait_for(lambda: all(group_gone(pid) for pid in children.values()))
        assert not any(port_in_use(port) for port in ports)
    finally:
        process.kill()
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
