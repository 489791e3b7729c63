"""Bodies an attacker could put on a queue, and a payload that proves it ran."""
from __future__ import annotations

import time
from typing import Optional

from kale.codec.keys import key_id, signing_keys
from kale.codec.sign import render_headers, signature
from kale.conf import settings

#: A signing key the test settings do not trust.
OTHER_KEY = 'another-signing-key-9876543210ab'


class CreatesFileWhenUnpickled:
    """Unpickling this runs open(path, 'w'): proof that a body was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, 'w'))


def envelope_headers(queue: str, serializer: str = 'p', compression: str = '-',
                     encoding: str = 'b', **more: str) -> dict[str, str]:
    """The headers of a body for ``queue`` issued now, signed with the current key."""
    headers = {'k': key_id(signing_keys(config=settings.config).current or b''), 'i': 'hostile-1',
               'n': 'tests.tasks.EchoTask', 't': str(int(time.time())), 'u': '0',
               's': serializer, 'c': compression, 'q': queue, 'd': encoding}
    headers.update(more)
    return headers


def signed_body(data: bytes, headers: Optional[dict[str, str]] = None, queue: str = 'q',
                key: Optional[bytes] = None) -> str:
    """A kale2 body with any headers and data, correctly signed (with the
    current key unless ``key`` is given): what only a key holder can make."""
    headers = headers if headers is not None else envelope_headers(queue)
    signing_key = key or signing_keys(config=settings.config).current or b''
    header = ('kale2:%s:' % render_headers(headers)).encode()
    return (header + signature(signing_key, header + data) + b':' + data).decode()


def signed_legacy_body(flags: str, data: bytes) -> str:
    """A body of the earlier kale1 format, correctly signed with the current key."""
    key = signing_keys(config=settings.config).current or b''
    header = ('kale1:%s:' % flags).encode()
    return (header + signature(key, header + data) + b':' + data).decode()
