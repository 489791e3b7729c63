"""Bodies an attacker could put on a queue, and a payload that proves it ran."""
from __future__ import annotations

from kale.codec.sign import signature, signing_keys

#: A signing key the test settings do not trust.
OTHER_KEY = 'another-signing-key-9876543210ab'


class CreatesFileWhenUnpickled:
    """Unpickling this runs open(path, 'w'): proof that a body was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, 'w'))


def signed_body(flags: str, data: bytes) -> str:
    """A kale1 body with any flags and data, correctly signed with the current key."""
    key = signing_keys()[0]
    header = ('kale1:%s:' % flags).encode()
    return (header + signature(key, header + data) + b':' + data).decode()
