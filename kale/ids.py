"""Random ids for tasks and messages, in the form of ``uuid.uuid4().hex``, from a
buffer of random bytes (why: docs/explanation/internals-top.md, "Ids")."""
from __future__ import annotations

import os
import threading

#: Ids made from one call to os.urandom.
IDS_PER_REFILL = 256

_lock = threading.Lock()
_pool = b''
_at = 0


def _forget() -> None:
    global _pool, _at, _lock
    _pool, _at = b'', 0
    _lock = threading.Lock()        # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget)      # POSIX only, as kale.publisher's


def random_id() -> str:
    """32 lowercase hex digits: a random (version 4) UUID."""
    global _pool, _at
    with _lock:
        if _at >= len(_pool):
            _pool, _at = os.urandom(16 * IDS_PER_REFILL), 0
        raw = bytearray(_pool[_at:_at + 16])
        _at += 16
    raw[6] = (raw[6] & 0x0F) | 0x40         # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80         # the RFC 4122 variant
    return raw.hex()

