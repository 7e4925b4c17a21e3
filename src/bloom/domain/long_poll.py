"""When a waiting claim gives up: each worker on a phase of its own, so that a fleet's long
polls come back spread over time rather than all at once.

Claims that began together (a fleet started, or reconnected after a restart) would otherwise end
together, and come back together, every `wait_seconds`, for good: 2,000 workers renewing within
a second held every database connection for seconds, and a task created then waited behind them
(issue 31). A claim ends instead at the latest moment of its wait's second half that falls on its
worker's phase of the half-wait period, a fixed fraction of it taken from the worker's id. The
first claims end between half and all of their wait, spread evenly; from then on each worker
comes back every full wait, at its own phase.
"""

import zlib


def claim_deadline(started_ms: int, wait_ms: int, worker_id: str) -> int:
    """The end (epoch ms) of a claim of `worker_id` that began at `started_ms` and may wait
    `wait_ms`: in its wait's second half, on the worker's phase."""
    half = wait_ms // 2
    end = started_ms + wait_ms
    if half <= 0:
        return end
    phase = zlib.crc32(worker_id.encode()) % half
    return end - (end - phase) % half
