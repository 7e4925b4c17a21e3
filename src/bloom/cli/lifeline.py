"""The lifeline: how a child of `bloom up` notices that its supervisor is gone, however it went
(SIGKILL, a crash, a closed terminal).

The supervisor holds the write end of a pipe and never writes to it; each child gets the read
end, its number in `BLOOM_LIFELINE_FD`, and watches it in a thread. End of file means no process
holds the write end any more: the supervisor is gone. The child then stops as SIGTERM stops it
(the servers shut down, the worker drains), its output sent to /dev/null since nobody reads it
any more, and its whole process group is killed if that takes longer than `GRACE_SEC`.
"""

import contextlib
import os
import signal
import threading
import time
from collections.abc import MutableMapping

LIFELINE_ENV = "BLOOM_LIFELINE_FD"
GRACE_SEC = 15.0
"""Longer than the supervisor's own stop grace (10 s): a drain that would have been waited for
is waited for."""


def watch(environ: MutableMapping[str, str]) -> None:
    """Watch the lifeline the environment names, if any. The name is taken out of `environ` and
    the descriptor is not inherited, so the child's own children (Claude CLI runs, server
    workers) hold no lifeline of their own."""
    value = environ.pop(LIFELINE_ENV, None)
    if value is None:
        return
    try:
        fd = int(value)
        os.set_inheritable(fd, False)
    except (ValueError, OSError):  # not ours: nothing to watch
        return
    threading.Thread(target=_watch, args=(fd,), name="lifeline", daemon=True).start()


def _watch(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 64):
            pass
    _silence()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_SEC)
    if os.getpgrp() == os.getpid():  # leading a group of its own, as the supervisor starts it
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _silence() -> None:
    """Stdout and stderr to /dev/null: the pipe they write to has no reader any more, and a
    write failing there must not break the stop."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd)
    os.close(devnull)
