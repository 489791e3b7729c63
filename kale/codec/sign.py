"""The signing step: the envelope around the data, and its HMAC-SHA256.

A body on the wire looks like ``kale1:<flags>:<signature>:<data>``:

- ``flags`` is two characters: the serializer (``p`` pickle, ``j`` JSON) and
  ``z`` when the data is zlib-compressed or ``-`` when it is not;
- ``data`` is the payload, base64-encoded unless it is plain JSON;
- ``signature`` is base64url(HMAC-SHA256(key, "kale1:<flags>:<data>")), so it
  covers everything else in the body, flags included.

On the way in this step runs first: it checks the signature with a
constant-time compare against the current key and every old key before any
other step decompresses or deserializes anything, so a body that fails is
never unpickled.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

from kale.codec.compress import HEADER as COMPRESSION
from kale.codec.pipeline import Frame
from kale.codec.serialize import HEADER as SERIALIZER
from kale.conf import settings
from kale.exceptions import DecodeError, ImproperlyConfigured

FORMAT_TAG = 'kale1'
MIN_KEY_BYTES = 16

#: Part of every development key shipped with Kale (settings/, example/).
DEVELOPMENT_KEY_MARK = b'not-for-production'

NO_KEY_HELP = (
    'MESSAGE_SIGNING_KEY is not set: every message is signed, so publishers and workers '
    'need the same secret key. Make one with '
    '`python -c "import secrets; print(secrets.token_hex(32))"` and set '
    'MESSAGE_SIGNING_KEY to it in your settings module (KALE_SETTINGS_MODULE)')


def _key_bytes(key: Any, setting: str) -> bytes:
    if isinstance(key, str):
        key = key.encode('utf-8')
    if not isinstance(key, bytes):
        raise ImproperlyConfigured('%s must be a string, got %s' % (setting, type(key).__name__))
    if len(key) < MIN_KEY_BYTES:
        raise ImproperlyConfigured('%s is too short (%d bytes); use at least %d, ideally 32 '
                                   'random bytes' % (setting, len(key), MIN_KEY_BYTES))
    return key


def signing_keys() -> tuple[bytes, list[bytes]]:
    """The key that signs and every key that verifies (current first), from
    ``MESSAGE_SIGNING_KEY`` and ``MESSAGE_SIGNING_OLD_KEYS``."""
    if not settings.MESSAGE_SIGNING_KEY:
        raise ImproperlyConfigured(NO_KEY_HELP)
    current = _key_bytes(settings.MESSAGE_SIGNING_KEY, 'MESSAGE_SIGNING_KEY')
    old = settings.MESSAGE_SIGNING_OLD_KEYS or ()
    if isinstance(old, (str, bytes)):
        old = (old,)
    return current, [current] + [_key_bytes(k, 'MESSAGE_SIGNING_OLD_KEYS') for k in old]


def signature(key: bytes, signed: bytes) -> bytes:
    """base64url(HMAC-SHA256(key, signed)), unpadded."""
    return base64.urlsafe_b64encode(hmac.new(key, signed, hashlib.sha256).digest()).rstrip(b'=')


class SignStep:
    """Wraps the data in the signed envelope, and verifies it on the way in."""

    name = 'sign'

    def __init__(self, key: bytes, verify_keys: list[bytes], size_limit: int):
        self.key = key
        self.verify_keys = verify_keys
        self.size_limit = size_limit

    @classmethod
    def from_settings(cls) -> 'SignStep':
        key, verify_keys = signing_keys()
        return cls(key, verify_keys, settings.SQS_TASK_SIZE_LIMIT)

    def encode(self, frame: Frame) -> None:
        flags = frame.headers[SERIALIZER] + frame.headers[COMPRESSION]
        data = frame.data if frame.text else base64.b64encode(frame.data)
        header = ('%s:%s:' % (FORMAT_TAG, flags)).encode('ascii')
        frame.body = (header + signature(self.key, header + data) + b':' + data).decode('ascii')

    def decode(self, frame: Frame) -> None:
        flags, data = self.verify(frame.body)
        if len(flags) != 2:
            raise DecodeError(DecodeError.CORRUPT, 'unknown format flags %r' % (flags,))
        frame.headers[SERIALIZER], frame.headers[COMPRESSION] = flags[0], flags[1]
        raw = data.encode('utf-8', 'surrogatepass')
        frame.text = flags == 'j-'
        try:
            frame.data = raw if frame.text else base64.b64decode(raw, validate=True)
        except binascii.Error as exc:
            raise DecodeError(DecodeError.CORRUPT, 'base64: %s' % exc) from exc

    def verify(self, body: Any) -> tuple[str, str]:
        """Check the envelope and its signature; returns (flags, data). Nothing
        is decoded yet. DecodeError (``too_large``, ``not_kale_message``,
        ``bad_signature``) when the body is refused."""
        if not isinstance(body, str):
            raise DecodeError(DecodeError.NOT_KALE, 'body is %s, not text' % type(body).__name__)
        if len(body) > self.size_limit:       # no publisher made it: refuse before hashing it
            raise DecodeError(DecodeError.TOO_LARGE, 'body of %d characters is over '
                              'SQS_TASK_SIZE_LIMIT of %d bytes' % (len(body), self.size_limit))
        parts = body.split(':', 3)
        if len(parts) != 4 or parts[0] != FORMAT_TAG:
            raise DecodeError(DecodeError.NOT_KALE, 'body does not start with a %s header'
                              % FORMAT_TAG)
        tag, flags, given, data = parts
        signed = ('%s:%s:%s' % (tag, flags, data)).encode('utf-8', 'surrogatepass')
        if not self._verified(given, signed):
            raise DecodeError(DecodeError.BAD_SIGNATURE,
                              'signature does not match MESSAGE_SIGNING_KEY or any old key')
        return flags, data

    def _verified(self, given: str, signed: bytes) -> bool:
        given_bytes = given.encode('utf-8', 'surrogatepass')
        matched = False
        for key in self.verify_keys:          # every key, so timing does not tell which
            matched |= hmac.compare_digest(signature(key, signed), given_bytes)
        return matched
