"""The codec's parts: the :class:`Frame` that flows through its steps, the
:class:`Step` protocol, and the :class:`Codec` that runs them in order."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence

from kale.exceptions import DecodeError, MessageTooLargeError
from kale.message import Message
from kale.transport import AttributeValue, OutgoingMessage


@dataclasses.dataclass
class Frame:
    """A message on its way through the codec. Each step reads and replaces
    some of these fields; ``headers`` are envelope fields the signature covers."""

    #: The message as a plain mapping (before serializing, after deserializing).
    payload: Optional[dict[str, Any]] = None
    #: The payload's bytes between the serializing step and the signing step.
    data: bytes = b''
    #: Whether ``data`` is plain ASCII text that may travel as is (else base64).
    text: bool = False
    #: Signed envelope fields, set by the steps that need them on the way back.
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The text body, once signed (on the way out) or as received (on the way in).
    body: str = ''
    #: SQS message attributes a step adds on the way out (not signed, so never
    #: trusted on the way in).
    attributes: dict[str, AttributeValue] = dataclasses.field(default_factory=dict)
    #: Who the frame is about, for error messages ('task NAME (ID)' or 'message').
    label: str = 'message'


class Step(Protocol):
    """One stage of the codec. ``encode`` runs on the way out, in pipeline
    order; ``decode`` on the way in, in reverse order. Both change the frame in
    place; ``decode`` raises :class:`~kale.exceptions.DecodeError` for a body
    it refuses."""

    name: str

    def encode(self, frame: Frame) -> None:
        ...

    def decode(self, frame: Frame) -> None:
        ...


class Codec:
    """Encodes messages into outgoing SQS messages and decodes bodies back."""

    def __init__(self, steps: Sequence[Step], size_limit: int):
        self.steps = list(steps)
        self.size_limit = size_limit

    def encode(self, message: Message) -> Frame:
        """Run ``message`` through every step; the frame holds the body and
        any attributes the steps added."""
        frame = Frame(payload=message.to_payload(),
                      label='task %s (%s)' % (message.task_name, message.task_id))
        for step in self.steps:
            step.encode(frame)
        return frame

    def encode_body(self, message: Message) -> str:
        """The signed body for ``message``."""
        return self.encode(message).body

    def to_outgoing(self, message: Message, delay_sec: int = 0,
                    extra_attributes: Optional[Mapping[str, AttributeValue]] = None
                    ) -> OutgoingMessage:
        """The message ready to send, checked against ``SQS_TASK_SIZE_LIMIT``."""
        frame = self.encode(message)
        attributes: dict[str, AttributeValue] = dict(message.attributes())
        attributes.update(frame.attributes)
        attributes.update(extra_attributes or {})
        outgoing = OutgoingMessage(frame.body, attributes, delay_sec)
        size = outgoing.size()
        if size > self.size_limit:
            raise MessageTooLargeError(
                'task %s (%s): encoded message is %d bytes, over SQS_TASK_SIZE_LIMIT of %d bytes'
                % (message.task_name, message.task_id, size, self.size_limit))
        return outgoing

    def decode(self, body: str) -> Message:
        """Verify, then decode, a body. Every refusal is a DecodeError whose
        ``reason`` names the check that failed and whose ``body`` is the body."""
        frame = Frame(body=body)
        try:
            for step in reversed(self.steps):
                step.decode(frame)
            try:
                return Message.from_payload(frame.payload)
            except ValueError as exc:
                raise DecodeError(DecodeError.CORRUPT, str(exc)) from exc
        except DecodeError as exc:
            exc.body = body
            raise
