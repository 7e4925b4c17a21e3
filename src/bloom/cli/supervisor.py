"""Child processes for `bloom up`: start them in order, each ready before the next, show their
output under their names, and stop them in reverse order.

Each child runs in a process group of its own, so Ctrl-C at the terminal reaches only us and we
decide the order of the shutdown; stopping a child signals its whole group (SIGTERM, then SIGKILL
after a grace period), so nothing it started outlives it.

The children also stop when we are gone however we went (SIGKILL, a crash): each watches the read
end of a pipe whose write end only we hold (`bloom.cli.lifeline`). Output that can no longer be
written (`bloom up | tee` with tee gone, a closed terminal) stops everything too, instead of
killing us with the children left running.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import click

from bloom.cli.lifeline import LIFELINE_ENV

TAIL_LINES = 20
NAME_WIDTH = 9
READY_POLL_MAX_SEC = 0.5
SECOND_STOP_AFTER_SEC = 1.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Ready = Callable[[], bool]
"""Polled until it answers True: the child is ready. It must not raise."""


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    ready: Ready
    ready_timeout_sec: float = 60.0
    colour: str = "white"
    cwd: Path | None = None


class ChildFailed(Exception):
    """A child died, or never got ready; `tail` holds its last output lines."""

    def __init__(self, name: str, reason: str, tail: Sequence[str]):
        super().__init__(f"{name} {reason}")
        self.name = name
        self.reason = reason
        self.tail = list(tail)


class StopRequested(Exception):
    """A stop signal arrived while children were starting."""


def prefix(name: str) -> str:
    """`runtime   |`: the fixed-width label in front of a child's lines."""
    return f"{name:<{NAME_WIDTH}} |"


def http_ready(
    url: str, *, headers: Mapping[str, str] | None = None, timeout_sec: float = 2.0
) -> Ready:
    """Ready when GET `url` answers 200."""
    import httpx  # only `bloom up` waits on children: not imported by `--help`

    def check() -> bool:
        try:
            response = httpx.get(url, headers=dict(headers or {}), timeout=timeout_sec)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    return check


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on `host:port` already (a bind fails)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes]
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    pump: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> int | None:
        return self.process.poll()

    def wait_output(self, timeout_sec: float = 2.0) -> None:
        """Let the output pump catch up with what the child wrote before it ended."""
        if self.pump is not None:
            self.pump.join(timeout_sec)


class Supervisor:
    """Starts children one by one, watches them, and stops them all in reverse order."""

    def __init__(
        self,
        *,
        say: Callable[[str], None] | None = None,
        stop_grace_sec: float = 10.0,
        poll_sec: float = 0.1,
    ):
        self.children: list[Child] = []
        self.stop_grace_sec = stop_grace_sec
        self.poll_sec = poll_sec
        self.stopping = threading.Event()
        self.hurry = threading.Event()
        self.output_lost = threading.Event()
        self._first_stop: float | None = None
        self._say = say or (lambda message: click.echo(message, err=True))
        self._lock = threading.Lock()
        self._lifeline: tuple[int, int] | None = None
        """The pipe each child watches (read end, write end): only we hold the write end."""

    # signals

    def request_stop(self) -> None:
        """Stop soon (the first Ctrl-C); a second one, a moment later, skips the grace period.

        One Ctrl-C under `make` or `uv run` arrives twice at once (the terminal signals the
        whole foreground group, and uv forwards it too): that counts as one."""
        now = time.monotonic()
        if self._first_stop is None:
            self._first_stop = now
        elif now - self._first_stop >= SECOND_STOP_AFTER_SEC:
            self.hurry.set()
        self.stopping.set()

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """SIGINT, SIGTERM and SIGHUP request a stop while inside this block."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # output

    def say(self, message: str) -> None:
        """A line about the children (stderr, by default)."""
        self._write(self._say, message)

    def show(self, line: str) -> None:
        """A line on stdout."""
        self._write(click.echo, line)

    def emit(self, child: ChildSpec, line: str) -> None:
        label = click.style(prefix(child.name), fg=child.colour)
        self.show(f"{label} {line}")

    def _write(self, write: Callable[[str], None], text: str) -> None:
        with self._lock:
            if self.output_lost.is_set():
                return
            try:
                write(text)
            except OSError:  # EPIPE: the reader is gone; EIO: so is the terminal
                self._lose_output()

    def _lose_output(self) -> None:
        """Stop everything, quietly: stdout and stderr go to /dev/null from now on, so that
        nothing (not even Python's last flush) fails on them again."""
        self.output_lost.set()
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # ValueError: no descriptor
                os.dup2(devnull, stream.fileno())
        os.close(devnull)
        self.request_stop()

    def _pump(self, child: Child) -> None:
        stream = child.process.stdout
        assert stream is not None
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            child.tail.append(line)
            self.emit(child.spec, line)
        stream.close()

    # starting

    def start(self, spec: ChildSpec) -> Child:
        """Start `spec` and wait until it is ready. Raises `ChildFailed` when it exits or is not
        ready in time (it is stopped then), `StopRequested` when asked to stop meanwhile."""
        if self.stopping.is_set():
            raise StopRequested
        if self._lifeline is None:
            self._lifeline = os.pipe()  # neither end inherited, but for the read end we pass
        lifeline = self._lifeline[0]
        process = subprocess.Popen(  # noqa: S603 - argv built by us, no shell
            list(spec.argv),
            env=dict(spec.env) | {LIFELINE_ENV: str(lifeline)},
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            pass_fds=(lifeline,),
        )
        child = Child(spec, process)
        child.pump = threading.Thread(target=self._pump, args=(child,), daemon=True)
        child.pump.start()
        self.children.append(child)
        self.say(click.style(f"started {spec.name} (pid {process.pid})", dim=True))
        self._wait_ready(child)
        return child

    def _wait_ready(self, child: Child) -> None:
        deadline = time.monotonic() + child.spec.ready_timeout_sec
        delay = self.poll_sec
        while True:
            if self.stopping.is_set():
                raise StopRequested
            code = child.exited()
            if code is not None:
                child.wait_output()
                reason = f"exited with {_status(code)} before it was ready"
                raise ChildFailed(child.name, reason, child.tail)
            if child.spec.ready() and child.exited() is None:
                return
            if time.monotonic() >= deadline:
                child.wait_output(0.2)
                raise ChildFailed(
                    child.name,
                    f"was not ready after {child.spec.ready_timeout_sec:g} s",
                    child.tail,
                )
            self.stopping.wait(delay)
            delay = min(delay * 1.5, READY_POLL_MAX_SEC)  # fewer access-log lines while it starts

    # running

    def wait(self) -> Child | None:
        """Block until a stop is requested (None) or a child exits (that child)."""
        while not self.stopping.wait(self.poll_sec):
            for child in self.children:
                if child.exited() is not None:
                    child.wait_output()
                    return child
        return None

    # stopping

    def stop_all(self) -> None:
        """Stop every child, the last started first; then let go of the lifeline."""
        for child in reversed(self.children):
            self.stop(child)
        if self._lifeline is not None:
            for end in self._lifeline:
                os.close(end)
            self._lifeline = None

    def stop(self, child: Child) -> None:
        """SIGTERM to the child's process group, SIGKILL after the grace period; then anything
        left in its group is killed too."""
        pgid = child.pid  # process_group=0: the child leads a group of its own
        if child.exited() is None:
            self.say(click.style(f"stopping {child.name} …", dim=True))
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_grace_sec
            while child.exited() is None and time.monotonic() < deadline:
                if self.hurry.is_set():
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(self.poll_sec)
            if child.exited() is None and self.hurry.is_set():
                self.say(f"killing {child.name} (asked twice)")
            elif child.exited() is None:
                self.say(f"{child.name} did not stop in {self.stop_grace_sec:g} s: killing it")
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(5)
        child.wait_output(1.0)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def describe_exit(child: Child) -> str:
    """`exited with status 1` / `was killed by signal SIGKILL`."""
    code = child.exited()
    if code is None:
        return "is running"
    return f"was killed by {_status(code)}" if code < 0 else f"exited with {_status(code)}"
