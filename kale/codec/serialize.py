"""The payload steps that make its bytes: serializing (pickle or JSON; the only
module that pickles or unpickles, on the way in only after the signature was
verified), compressing (zlib when it makes the body smaller, decompression
bounded) and encrypting (AES-256-GCM: docs/explanation/internals-transport.md, "Keys")."""
from __future__ import annotations

import json
import os
import pickle
import zlib
from typing import Any, Optional

from kale.codec.keys import KeyRing
from kale.codec.pipeline import COMPRESSION, ENCRYPTION, SERIALIZER, Frame
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    MessageTooLargeError,
    SerializationError,
)

#: Serializer name -> the code its bodies carry in the envelope.
SERIALIZER_CODES = {'pickle': 'p', 'json': 'j'}
SERIALIZER_NAMES = {code: name for name, code in SERIALIZER_CODES.items()}


class SerializeStep:
    """Payload <-> bytes, the serializer named in the envelope so a worker reads bodies of either kind."""

    name = 'serialize'

    def __init__(self, serializer: str, pickle_protocol: int = pickle.DEFAULT_PROTOCOL, max_bytes: int = 0):
        if serializer not in SERIALIZER_CODES:
            raise ImproperlyConfigured("SERIALIZER must be 'pickle' or 'json', got %r" % (serializer,))
        self.serializer = serializer
        self.pickle_protocol = pickle_protocol
        #: Largest serialized payload (MAX_DECOMPRESSED_BYTES): what every
        #: worker would refuse to decompress is refused at publish time.
        self.max_bytes = max_bytes

    def encode(self, frame: Frame) -> None:
        try:
            frame.data = self._dumps(frame.payload)
        except (pickle.PicklingError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise SerializationError('%s: arguments cannot be serialized with %s: %s: %s'
                                     % (frame.label, self.serializer, type(exc).__name__, exc)) from exc
        if self.max_bytes and len(frame.data) > self.max_bytes:
            raise MessageTooLargeError(
                '%s: serialized payload is %d bytes, over MAX_DECOMPRESSED_BYTES of %d bytes '
                '(no worker would decode it)' % (frame.label, len(frame.data), self.max_bytes))
        frame.headers[SERIALIZER] = SERIALIZER_CODES[self.serializer]
        frame.text = self.serializer == 'json'      # ASCII JSON needs no base64

    def decode(self, frame: Frame) -> None:
        code = frame.headers.get(SERIALIZER, '')
        serializer = SERIALIZER_NAMES.get(code)
        if serializer is None:
            raise DecodeError(DecodeError.CORRUPT, 'unknown serializer code %r' % (code,))
        try:
            frame.payload = _loads(frame.data, serializer)
        except ValueError as exc:
            raise DecodeError(DecodeError.CORRUPT, str(exc)) from exc
        except Exception as exc:  # unpickling a signed body can raise anything
            raise DecodeError(DecodeError.CORRUPT, '%s: %s' % (type(exc).__name__, exc)) from exc

    def _dumps(self, payload: Any) -> bytes:
        if self.serializer == 'pickle':
            return pickle.dumps(payload, protocol=self.pickle_protocol)
        return json.dumps(payload, separators=(',', ':'), ensure_ascii=True, allow_nan=False).encode('ascii')


def _loads(raw: bytes, serializer: str) -> Any:
    if serializer == 'pickle':
        return pickle.loads(raw)
    return json.loads(raw.decode('utf-8'))


#: Header values: 'z' when the data is zlib-compressed, '-' when not.
COMPRESSED, PLAIN = 'z', '-'


def base64_length(n: int) -> int:
    """Characters that ``n`` bytes take in base64."""
    return 4 * ((n + 2) // 3)


class CompressStep:
    """Compress payloads of at least ``min_bytes`` when that saves space on the wire."""

    name = 'compress'
    plain_header = (COMPRESSION, PLAIN)       # not compressed: decode does nothing

    def __init__(self, min_bytes: int, max_decompressed_bytes: int):
        self.min_bytes = min_bytes
        self.max_decompressed_bytes = max_decompressed_bytes

    def encode(self, frame: Frame) -> None:
        frame.headers[COMPRESSION] = PLAIN
        if len(frame.data) < self.min_bytes:
            return
        squeezed = zlib.compress(frame.data, 6)
        # Compressed data always travels as base64; compare the wire sizes.
        wire_length = len(frame.data) if frame.text else base64_length(len(frame.data))
        if base64_length(len(squeezed)) < wire_length:
            frame.data, frame.text = squeezed, False
            frame.headers[COMPRESSION] = COMPRESSED

    def decode(self, frame: Frame) -> None:
        flag = frame.headers.get(COMPRESSION, PLAIN)
        if flag == PLAIN:
            return
        if flag != COMPRESSED:
            raise DecodeError(DecodeError.CORRUPT, 'unknown compression flag %r' % (flag,))
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(frame.data, self.max_decompressed_bytes)
        except zlib.error as exc:
            raise DecodeError(DecodeError.CORRUPT, 'zlib: %s' % exc) from exc
        if inflater.unconsumed_tail:
            raise DecodeError(DecodeError.CORRUPT, 'decompresses to more than %d bytes '
                              '(MAX_DECOMPRESSED_BYTES)' % self.max_decompressed_bytes)
        if not inflater.eof:
            raise DecodeError(DecodeError.CORRUPT, 'compressed data is truncated')
        frame.data = raw


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
