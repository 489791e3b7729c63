"""The message codec: a pipeline of steps between a :class:`~kale.message.Message`
and the signed text body that travels through SQS, built once an app by
:func:`build_codec` (docs/explanation/internals-transport.md, "The codec").
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec.keys import encryption_keys
from kale.codec.offload import OffloadStep
from kale.codec.pipeline import Codec, Frame, Step
from kale.codec.policy import PolicyStep
from kale.codec.serialize import CompressStep, EncryptStep, SerializeStep
from kale.codec.sign import SignStep
from kale.config import Config
from kale.default import default_app
from kale.message import Message
from kale.transport import AttributeValue, OutgoingMessage
from kale.transport.payloads import PayloadStore, replaced_payload_store

__all__ = ['Codec', 'Frame', 'Step', 'build_codec', 'decode', 'encode', 'to_outgoing']


def offload_threshold(config: Config) -> int:
    """Largest message kept whole in SQS: ``PAYLOAD_OFFLOAD_BYTES``, at most ``SQS_TASK_SIZE_LIMIT``."""
    return min(int(config.PAYLOAD_OFFLOAD_BYTES), int(config.SQS_TASK_SIZE_LIMIT))


def build_codec(config: Config, clock: Clock = SYSTEM_CLOCK,
                payloads: Optional[Callable[[], PayloadStore]] = None) -> Codec:
    """The codec ``config`` describes; ``clock`` tells a body's age;
    ``payloads`` gives the payload store (its app's; by default an S3 store
    of its own, made on first use)."""
    if payloads is None:
        payloads = _own_s3(config)
    max_bytes = config.MAX_DECOMPRESSED_BYTES
    envelope: list[Step] = [
        # ACCEPT_SERIALIZERS, or just SERIALIZER when it is not set
        PolicyStep(config.MESSAGE_MAX_AGE_SEC, config.ACCEPT_SERIALIZERS or [config.SERIALIZER],
                   clock=clock.time),
        SignStep.from_config(config),
    ]
    payload: list[Step] = [
        SerializeStep(config.SERIALIZER, config.PICKLE_PROTOCOL, max_bytes),
        CompressStep(config.COMPRESSION_MIN_BYTES, max_bytes),
        EncryptStep(encryption_keys(config)),
        OffloadStep(config.PAYLOAD_BUCKET, offload_threshold(config), max_bytes, envelope, store=payloads),
    ]
    return Codec(payload, envelope, config.SQS_TASK_SIZE_LIMIT)


def _own_s3(config: Config) -> Callable[[], PayloadStore]:
    """The store put in place for a block (tests, eager mode), else an S3 store of the codec's own."""
    @functools.cache
    def own() -> PayloadStore:
        from kale.transport.s3 import S3PayloadStore
        return S3PayloadStore(config=config)

    def store() -> PayloadStore:
        replaced = replaced_payload_store()
        return own() if replaced is None else replaced
    return store


def encode(message: Message, queue: str) -> str:
    """The signed body for ``message`` sent to ``queue``, with the default app's settings."""
    return default_app().codec.encode(message, queue).body


def to_outgoing(message: Message, queue: str, delay_sec: int = 0,
                extra_attributes: Optional[Mapping[str, AttributeValue]] = None) -> OutgoingMessage:
    """``message`` ready to send to ``queue``, with the default app's settings."""
    return default_app().codec.to_outgoing(message, queue, delay_sec, extra_attributes)


def decode(body: str, queue: str, check_age: bool = True) -> Message:
    """Verify and decode ``body`` received on ``queue`` (DecodeError if refused),
    with the default app's settings."""
    return default_app().codec.decode(body, queue, check_age)
