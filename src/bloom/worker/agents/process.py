"""Running an agent CLI once, whatever the CLI: spawn, feed, stream, timeout and kill (shared by
every adapter).

The adapter says what to run (`Launch`: argv, environment, working directory, the text for
stdin) and how to read its stdout (`StreamParser`: each line into task events); this module runs
it. The prompt goes on stdin (never in argv, where `ps` would show it and the argument size limit
would cut it). The CLI runs in a process group of its own, so a timeout or a cancel kills it and
everything it started; on Linux it is also killed when the worker dies, even by kill -9 (its
parent-death signal). Its stderr is forwarded as `stderr` events and its tail kept.
"""

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bloom.worker.agents.base import Launch, StreamParser
from bloom.worker.agents.outcome import RunReport

KILL_GRACE_SEC = 3.0
STDERR_TAIL = 4000
STREAM_LIMIT = 16 * 1024 * 1024  # one stream-json line can carry a whole file a tool read

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4

EventSink = Callable[[str, Any], Awaitable[None]]
"""Receives each event of the run: what the adapter's parser made of a stdout line (Claude:
("claude", <stream-json object>)), or ("stderr", {"line"})."""
Gate = Callable[[], Awaitable[bool]]
"""Whether the prompt may go to the CLI: awaited once the CLI has started, before it is fed."""


_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child before exec: be killed when the worker dies, even by kill -9 (Linux)."""
    assert _LIBC is not None
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def undumpable() -> None:
    """The worker, not dumpable (Linux): what it runs as its own user (the CLI, and whatever a
    prompt has the CLI run) can then neither read its /proc/<pid>/environ or memory (the
    worker's keys) nor ptrace it. A child is dumpable again once it execs."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_DUMPABLE, 0)


@functools.cache
def death_signal_prefix() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` where util-linux's setpriv can (2.33 and later): it sets the
    parent-death signal, then execs the CLI. Then no `preexec_fn` does it, which would make Python
    fork the worker's whole process for each run instead of using vfork (about 7 ms a run, on the
    way to the CLI's start). Else none: the `preexec_fn` it is."""
    setpriv = shutil.which("setpriv") if _LIBC is not None else None
    if setpriv is None:
        return ()
    prefix = (setpriv, "--pdeathsig", "KILL", "--")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=5)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if probe.returncode == 0 else ()


class AgentProcess:
    """One run; `cancel()` (from another task) stops it as a cancel, not a failure."""

    def __init__(
        self, invocation: Launch, parser: StreamParser, sink: EventSink, gate: Gate | None = None
    ):
        """With `gate`, the CLI starts at once but gets its prompt (on stdin, which it reads to
        the end before it does anything) only once `gate` says yes; if it says no, the CLI is
        killed unfed (`withheld`): it never asked a model or ran a tool."""
        self.invocation = invocation
        self.parser = parser
        self.sink = sink
        self.gate = gate
        self.withheld = False
        self._process: asyncio.subprocess.Process | None = None
        self._cancelled = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def run(self) -> RunReport:
        inv = self.invocation
        started = time.monotonic()
        try:
            process = self._process = await self._spawn()
        except OSError as exc:
            return RunReport(
                exit_code=None,
                duration_ms=0,
                stderr_tail=f"cannot start {inv.binary}: {exc.strerror or exc}",
            )
        stderr: list[str] = []
        timed_out = False
        io = asyncio.gather(
            self._feed(process),
            self._read_stdout(process),
            self._read_stderr(process, stderr),
            process.wait(),
        )
        try:
            _, result, _, _ = await asyncio.wait_for(asyncio.shield(io), inv.timeout_sec)
        except TimeoutError:
            timed_out = not self._cancelled
            await self.kill()
            _, result, _, _ = await io
        except asyncio.CancelledError:
            await self.kill()
            await asyncio.gather(io, return_exceptions=True)  # its pipes close with the process
            raise
        _signal_group(process.pid, signal.SIGKILL)  # nothing it started outlives the run
        return RunReport(
            exit_code=process.returncode,
            duration_ms=int((time.monotonic() - started) * 1000),
            result=result,
            stderr_tail="\n".join(stderr)[-STDERR_TAIL:],
            timed_out=timed_out,
            timeout_sec=inv.timeout_sec,
            cancelled=self._cancelled,
        )

    async def _spawn(self) -> asyncio.subprocess.Process:
        inv = self.invocation
        prefix = death_signal_prefix()
        return await asyncio.create_subprocess_exec(
            *prefix,
            *inv.argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=inv.cwd,
            env=inv.env,
            start_new_session=True,
            limit=STREAM_LIMIT,
            preexec_fn=_die_with_parent if _LIBC is not None and not prefix else None,
        )

    async def _feed(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        if self.gate is not None and not await self.gate():
            self.withheld = True
            await self.kill()  # its stdin still open: it has read no prompt
            return
        try:
            process.stdin.write(self.invocation.stdin.encode())
            await process.stdin.drain()
            process.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> dict[str, Any] | None:
        """Every line, as the adapter's parser reads it, to the sink; the run's final record
        (the parser's), if one came."""
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            for kind, payload in self.parser.feed(line):
                await self.sink(kind, payload)
        return self.parser.final

    async def _read_stderr(self, process: asyncio.subprocess.Process, lines: list[str]) -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            lines.append(line)
            await self.sink("stderr", {"line": line[:2000]})

    async def cancel(self) -> None:
        self._cancelled = True
        await self.kill()

    async def kill(self) -> None:
        """SIGTERM to the whole group, SIGKILL after a grace period."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), KILL_GRACE_SEC)
        _signal_group(process.pid, signal.SIGKILL)  # stragglers in the group, too


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
