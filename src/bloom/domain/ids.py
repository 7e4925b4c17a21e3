"""Ids: time-ordered UUIDs (version 7), which sort by creation and keep indexes and audit order
tidy; and a project's canonical id, the same on every node and in the reference's tools."""

import hashlib
import os
import threading
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id(now_ms: int) -> str:
    """A UUIDv7 string for `now_ms`; ids made in one process never go backwards."""
    global _last_ms, _counter
    with _lock:
        if now_ms > _last_ms:
            _last_ms, _counter = now_ms, 0
        else:
            _counter += 1
            if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                _last_ms, _counter = _last_ms + 1, 0
        ms, counter = _last_ms, _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    return str(uuid.UUID(int=value))


def id_time(made: str) -> int:
    """The millisecond a `new_id` carries (at least the instant it was made for)."""
    return int(made[:8] + made[9:13], 16)


def retimed(made: str, ms: int) -> str:
    """`made` (a `new_id`) as if made for `ms` when that is later than its own time (else
    `made` itself): what a statement that learns the instant of a row only as it writes it
    composes (`lpad(to_hex(greatest(ms, its time)), 12, '0')` before the id's tail). Like a
    `new_id(ms)` made then, it sorts after every id this process made before `made`."""
    ms = max(ms, id_time(made))
    hexed = f"{ms & ((1 << 48) - 1):012x}"
    return f"{hexed[:8]}-{hexed[8:]}{made[13:]}"


def canonical_id(name: str) -> str:
    """A project's canonical id: the first 16 hex digits of the SHA-256 of its UTF-8 name."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
