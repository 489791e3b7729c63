"""The serializing step: the message's payload to bytes and back, with
pickle or JSON. This is the only module that pickles or unpickles; it runs on
the way in only after the signature was verified."""
from __future__ import annotations

import json
import pickle
from typing import Any

from kale.codec.pipeline import SERIALIZER as HEADER
from kale.codec.pipeline import Frame
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
        frame.headers[HEADER] = SERIALIZER_CODES[self.serializer]
        frame.text = self.serializer == 'json'      # ASCII JSON needs no base64

    def decode(self, frame: Frame) -> None:
        code = frame.headers.get(HEADER, '')
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
