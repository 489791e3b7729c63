"""The message codec: a pipeline of steps between a :class:`~kale.message.Message`
and the signed text body that travels through SQS.

On the way out the steps run in order, each transforming a
:class:`~kale.codec.pipeline.Frame`: serialize the message's payload to bytes,
compress them when that helps, encrypt them (with ``MESSAGE_ENCRYPTION_KEY``),
keep them in S3 when the message would be too big (with ``PAYLOAD_BUCKET``),
bind them to their queue, then sign them into the body. On the way in they run
in reverse: verify the signature (before anything else touches the data),
check the replay window and the queue, then fetch and check a payload kept in
S3, decrypt, decompress, deserialize. A feature that changes the body (ids
carried in attributes, say) is one more :class:`~kale.codec.pipeline.Step` in
:func:`build_codec`, not an edit to the others.

The codec is built once per settings generation (:func:`get_codec`), so its
keys and choices are read and checked once, not for every message.
"""
from __future__ import annotations

import threading
from typing import Mapping, Optional

from kale.codec.compress import CompressStep
from kale.codec.encrypt import EncryptStep
from kale.codec.keys import encryption_keys
from kale.codec.offload import OffloadStep
from kale.codec.pipeline import Codec, Frame, Step
from kale.codec.policy import PolicyStep
from kale.codec.serialize import SerializeStep
from kale.codec.sign import SignStep
from kale.conf import settings
from kale.message import Message
from kale.transport import AttributeValue, OutgoingMessage

__all__ = ['Codec', 'Frame', 'Step', 'build_codec', 'decode', 'encode', 'get_codec', 'to_outgoing']


def accepted_serializers() -> list[str]:
    """``ACCEPT_SERIALIZERS``, or just ``SERIALIZER`` when it is not set."""
    return list(settings.ACCEPT_SERIALIZERS or [settings.SERIALIZER])


def offload_threshold() -> int:
    """Largest message kept whole in SQS: ``PAYLOAD_OFFLOAD_BYTES``, but at
    most ``SQS_TASK_SIZE_LIMIT``."""
    return min(int(settings.PAYLOAD_OFFLOAD_BYTES), int(settings.SQS_TASK_SIZE_LIMIT))


def build_codec() -> Codec:
    """The codec the settings describe."""
    max_bytes = settings.MAX_DECOMPRESSED_BYTES
    envelope: list[Step] = [
        PolicyStep(settings.MESSAGE_MAX_AGE_SEC, accepted_serializers()),
        SignStep.from_settings(),
    ]
    payload: list[Step] = [
        SerializeStep(settings.SERIALIZER, settings.PICKLE_PROTOCOL, max_bytes),
        CompressStep(settings.COMPRESSION_MIN_BYTES, max_bytes),
        EncryptStep(encryption_keys()),
        OffloadStep(settings.PAYLOAD_BUCKET, offload_threshold(), max_bytes, envelope),
    ]
    return Codec(payload, envelope, settings.SQS_TASK_SIZE_LIMIT)


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


def encode(message: Message, queue: str) -> str:
    """The signed body for ``message`` sent to ``queue``, with the current settings."""
    return get_codec().encode(message, queue).body


def to_outgoing(message: Message, queue: str, delay_sec: int = 0,
                extra_attributes: Optional[Mapping[str, AttributeValue]] = None
                ) -> OutgoingMessage:
    """``message`` ready to send to ``queue``, with the current settings."""
    return get_codec().to_outgoing(message, queue, delay_sec, extra_attributes)


def decode(body: str, queue: str, check_age: bool = True) -> Message:
    """Verify and decode ``body`` received on ``queue`` (DecodeError if refused)."""
    return get_codec().decode(body, queue, check_age)
