"""The encrypting step: AES-256-GCM over the compressed payload before it is signed
(``MESSAGE_ENCRYPTION_KEY``), a fresh 96-bit nonce in front of each ciphertext and
the key's id in the ``e`` header, so keys rotate as signing keys do.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from kale.codec.keys import KeyRing
from kale.codec.pipeline import ENCRYPTION, Frame
from kale.exceptions import DecodeError

NONCE_BYTES = 12


class EncryptStep:
    """Encrypts payloads with the current key; decrypts with the key a body names."""

    name = 'encrypt'
    plain_header = (ENCRYPTION, None)    # not encrypted: decode does nothing

    def __init__(self, keys: Optional[KeyRing]):
        self.keys = keys
        self._ciphers: dict[str, Any] = {}
        if keys is not None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            self._ciphers = {kid: AESGCM(key) for kid, key in keys.accepted.items()}

    def encode(self, frame: Frame) -> None:
        if self.keys is None or self.keys.current is None:    # off, or old keys only
            return
        kid = self.keys.current_id
        nonce = os.urandom(NONCE_BYTES)
        frame.data = nonce + self._ciphers[kid].encrypt(nonce, frame.data, kid.encode())
        frame.text = False
        frame.headers[ENCRYPTION] = kid

    def decode(self, frame: Frame) -> None:
        kid = frame.headers.get(ENCRYPTION)
        if kid is None:
            return
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise DecodeError(DecodeError.CORRUPT, 'encrypted with key %r, which is neither '
                              'MESSAGE_ENCRYPTION_KEY nor an old key' % (kid,))
        if len(frame.data) < NONCE_BYTES + 16:
            raise DecodeError(DecodeError.CORRUPT, 'encrypted data is truncated')
        from cryptography.exceptions import InvalidTag
        try:
            frame.data = cipher.decrypt(frame.data[:NONCE_BYTES], frame.data[NONCE_BYTES:], kid.encode())
        except (InvalidTag, ValueError) as exc:
            raise DecodeError(DecodeError.CORRUPT, 'cannot be decrypted') from exc
