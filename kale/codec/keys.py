"""The keys that sign and encrypt message bodies, read from a configuration; a
key's public id, which the envelope names, is the first 8 hex digits of its
SHA-256 (docs/explanation/internals-transport.md, "Keys").
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

from kale.config import Config
from kale.exceptions import ImproperlyConfigured

#: Shortest signing key accepted anywhere.
MIN_KEY_BYTES = 16
#: Shortest signing key, and encryption key, accepted with a remote endpoint.
STRONG_KEY_BYTES = 32
#: Part of every development key shipped with Kale (settings/, example/, bench/).
DEVELOPMENT_KEY_MARK = b'not-for-production'

NO_KEY_HELP = (
    'MESSAGE_SIGNING_KEY is not set: every message is signed, so publishers and workers need the same '
    'secret key. Make one with `python -c "import secrets; print(secrets.token_hex(32))"` and set '
    'MESSAGE_SIGNING_KEY to it in your settings module (KALE_SETTINGS_MODULE)')

#: HKDF inputs: the AES key is derived from the configured secret, never used raw.
_HKDF_SALT = b'kale message encryption'
_HKDF_INFO = b'kale2 aes-256-gcm'


def key_id(key: bytes) -> str:
    """The public id of a key."""
    return hashlib.sha256(key).hexdigest()[:8]


def _key_bytes(key: Any, setting: str, minimum: int, strong: bool = False) -> bytes:
    """``key`` as bytes, refused when short or, ``strong``, a development key."""
    if isinstance(key, str):
        key = key.encode('utf-8')
    if not isinstance(key, bytes):
        raise ImproperlyConfigured('%s must be a string, got %s' % (setting, type(key).__name__))
    if len(key) < minimum:
        raise ImproperlyConfigured('%s is too short (%d bytes); use at least %d, e.g. '
                                   '`python -c "import secrets; print(secrets.token_hex(32))"`'
                                   % (setting, len(key), minimum))
    if strong and DEVELOPMENT_KEY_MARK in key:
        raise ImproperlyConfigured(
            '%s is a development key, public in Kale\'s sources, and the endpoint is not on this '
            'machine: set a secret key of at least %d bytes' % (setting, STRONG_KEY_BYTES))
    return key


def _key_list(value: Any) -> list[Any]:
    if not value:
        return []
    return [value] if isinstance(value, (str, bytes)) else list(value)


@dataclasses.dataclass(frozen=True)
class KeyRing:
    """The key that signs (or encrypts) and every key that is still accepted,
    by id, current first."""

    current: Optional[bytes]
    accepted: dict[str, bytes]

    @property
    def current_id(self) -> str:
        return key_id(self.current) if self.current is not None else ''


def _ring(current: bytes, old: list[bytes]) -> KeyRing:
    accepted = {key_id(current): current}
    for key in old:
        accepted.setdefault(key_id(key), key)
    return KeyRing(current, accepted)


def signing_keys(strong: bool = False, *, config: Config) -> KeyRing:
    """``MESSAGE_SIGNING_KEY`` and ``MESSAGE_SIGNING_OLD_KEYS`` of ``config``.
    With ``strong`` (a remote endpoint), short keys and development keys are
    refused."""
    if not config.MESSAGE_SIGNING_KEY:
        raise ImproperlyConfigured(NO_KEY_HELP)
    minimum = STRONG_KEY_BYTES if strong else MIN_KEY_BYTES
    current = _key_bytes(config.MESSAGE_SIGNING_KEY, 'MESSAGE_SIGNING_KEY', minimum, strong)
    old = [_key_bytes(k, 'MESSAGE_SIGNING_OLD_KEYS', minimum, strong)
           for k in _key_list(config.MESSAGE_SIGNING_OLD_KEYS)]
    return _ring(current, old)


def derive_aes_key(secret: bytes) -> bytes:
    """The AES-256 key for a configured encryption secret (HKDF-SHA256)."""
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError:
        raise ImproperlyConfigured(
            "MESSAGE_ENCRYPTION_KEY needs the 'cryptography' package: pip install "
            "'kale-sqs[encryption]' (in a checkout: pip install -e '.[encryption]')") from None
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(secret)


def encryption_keys(config: Config) -> Optional[KeyRing]:
    """``MESSAGE_ENCRYPTION_KEY`` and ``MESSAGE_ENCRYPTION_OLD_KEYS`` as derived
    AES keys (ids are of the derived keys); None when neither is set. With old
    keys only, nothing new is encrypted but queued bodies still decrypt (the
    way to turn encryption off)."""
    old = [derive_aes_key(_key_bytes(k, 'MESSAGE_ENCRYPTION_OLD_KEYS', STRONG_KEY_BYTES))
           for k in _key_list(config.MESSAGE_ENCRYPTION_OLD_KEYS)]
    if not config.MESSAGE_ENCRYPTION_KEY:
        return KeyRing(None, {key_id(k): k for k in old}) if old else None
    current = _key_bytes(config.MESSAGE_ENCRYPTION_KEY, 'MESSAGE_ENCRYPTION_KEY', STRONG_KEY_BYTES)
    return _ring(derive_aes_key(current), old)
