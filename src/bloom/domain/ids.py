"""Time-ordered UUIDs (version 7): ids sort by creation, keeping indexes and audit order tidy."""

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
