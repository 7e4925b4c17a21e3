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


def canonical_id(name: str) -> str:
    """A project's canonical id: the first 16 hex digits of the SHA-256 of its UTF-8 name."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
