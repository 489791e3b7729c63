"""The message codec: a pipeline of steps between a :class:`~kale.message.Message`
and the signed text body that travels through SQS.

On the way out the steps run in order, each transforming a :class:`Frame`:
serialize the message's payload to bytes, compress them when that helps,
then sign them into the body. On the way in they run in reverse: verify the
signature (before anything else touches the data), decompress, deserialize.
A feature that changes the body (encryption, payloads stored elsewhere, ids
carried in attributes) is one more :class:`Step` in :func:`build_codec`,
not an edit to the others.

The codec is built once per settings generation (:func:`get_codec`), so its
keys and choices are read and checked once, not for every message.
"""
from __future__ import annotations

import threading
from typing import Mapping, Optional

from kale.codec.compress import CompressStep
from kale.codec.pipeline import Codec, Frame, Step
from kale.codec.serialize import SerializeStep
from kale.codec.sign import SignStep
from kale.conf import settings
from kale.message import Message
from kale.transport import AttributeValue, OutgoingMessage

__all__ = ['Codec', 'Frame', 'Step', 'build_codec', 'decode', 'encode', 'get_codec', 'to_outgoing']


def build_codec() -> Codec:
    """The codec the settings describe: serialize, compress, sign."""
    steps: list[Step] = [
        SerializeStep(settings.SERIALIZER, settings.PICKLE_PROTOCOL),
        CompressStep(settings.COMPRESSION_MIN_BYTES),
        SignStep.from_settings(),
    ]
    return Codec(steps, settings.SQS_TASK_SIZE_LIMIT)


_lock = threading.Lock()
_codec: Optional[tuple[int, Codec]] = None


def get_codec() -> Codec:
    """The codec for the current settings (rebuilt when they change)."""
    global _codec
    generation = settings.generation
    current = _codec
    if current is not None and current[0] == generation:
        return current[1]
    with _lock:
        if _codec is None or _codec[0] != generation:
            _codec = (generation, build_codec())
        return _codec[1]


def encode(message: Message) -> str:
    """The signed body for ``message``, with the current settings."""
    return get_codec().encode_body(message)


def to_outgoing(message: Message, delay_sec: int = 0,
                extra_attributes: Optional[Mapping[str, AttributeValue]] = None
                ) -> OutgoingMessage:
    """``message`` ready to send, with the current settings."""
    return get_codec().to_outgoing(message, delay_sec, extra_attributes)


def decode(body: str) -> Message:
    """Verify and decode ``body`` with the current settings (DecodeError if refused)."""
    return get_codec().decode(body)
