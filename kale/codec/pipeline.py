"""The codec's parts: the :class:`Frame` that flows through its steps, the
:class:`Step` protocol, and the :class:`Codec` that runs them in order.

The steps come in two groups. *Payload* steps turn the message into bytes
(serialize, compress, encrypt). *Envelope* steps wrap those bytes in what
travels on the wire (the replay checks, the signature). On the way in,
:meth:`Codec.open` runs only the envelope steps: the body is verified and its
signed headers (task id, task path, issue time, queue) are known, while the
payload is still compressed and encrypted. :meth:`Codec.read` then runs the
payload steps, just before the task runs, so a worker never holds more than
one decompressed payload at a time.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, Optional, Protocol, Sequence
from urllib.parse import parse_qsl, urlencode

from kale.exceptions import DecodeError, MessageTooLargeError
from kale.message import (
    ATTR_FAILURE_NUM,
    ATTR_RETRY_NUM,
    ATTR_TASK_ID,
    ATTR_TASK_NAME,
    Message,
)
from kale.transport import AttributeValue, OutgoingMessage

# Signed envelope headers, one letter each. Steps may add their own.
TASK_ID = 'i'
TASK_NAME = 'n'
ISSUED_AT = 't'        # when the task was first published (whole seconds since the epoch)
QUEUE = 'q'            # the SQS queue the body was signed for
UNSETTLED = 'u'        # deliveries that ended with nobody settling the message
RETRY_NUM = 'r'
FAILURE_NUM = 'f'
SIGNING_KEY = 'k'      # id of the key that signed it
SERIALIZER = 's'
COMPRESSION = 'c'
ENCRYPTION = 'e'       # id of the key that encrypted it
ENCODING = 'd'         # 't': data travels as text; 'b': as base64
CONTEXT = 'x'          # the message's context (a trace context), form-encoded


def render_context(context: Mapping[str, str]) -> str:
    """A message's context as one header value: ``name=value&...``, form-encoded."""
    return urlencode(sorted(context.items()))


def parse_context(text: str) -> dict[str, str]:
    """The context in a verified envelope's header (what :func:`render_context` made)."""
    return dict(parse_qsl(text, keep_blank_values=True))


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
    #: The SQS queue the body is signed for (out) or was received on (in).
    queue: str = ''
    #: SQS message attributes a step adds on the way out (not signed, so never
    #: trusted on the way in).
    attributes: dict[str, AttributeValue] = dataclasses.field(default_factory=dict)
    #: Who the frame is about, for error messages ('task NAME (ID)' or 'message').
    label: str = 'message'
    #: A body in the format before ``kale2`` (only with ACCEPT_LEGACY_MESSAGES):
    #: it has no task, time or queue headers.
    legacy: bool = False
    #: On the way in: whether the envelope steps check the issue time.
    check_age: bool = True

    @property
    def task_name(self) -> str:
        """The task path from the verified headers ('' for a legacy body)."""
        return self.headers.get(TASK_NAME, '')

    @property
    def task_id(self) -> str:
        return self.headers.get(TASK_ID, '')

    @property
    def issued_at(self) -> float:
        return float(self.headers.get(ISSUED_AT, 0) or 0)

    @property
    def unsettled(self) -> int:
        return int(self.headers.get(UNSETTLED, 0) or 0)

    def message_attributes(self) -> dict[str, AttributeValue]:
        """The SQS attributes of the message this verified envelope holds, as
        publishing set them (a worker does not receive them: they are unsigned)."""
        if self.legacy:
            return {}
        return {ATTR_TASK_ID: self.task_id, ATTR_TASK_NAME: self.task_name,
                ATTR_RETRY_NUM: int(self.headers.get(RETRY_NUM, 0) or 0),
                ATTR_FAILURE_NUM: int(self.headers.get(FAILURE_NUM, 0) or 0)}


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

    def __init__(self, payload_steps: Sequence[Step], envelope_steps: Sequence[Step],
                 size_limit: int):
        self.payload_steps = list(payload_steps)
        self.envelope_steps = list(envelope_steps)
        self.size_limit = size_limit

    @property
    def steps(self) -> list[Step]:
        """Every step, in the order they run on the way out."""
        return self.payload_steps + self.envelope_steps

    # --- out --------------------------------------------------------------------

    def encode(self, message: Message, queue: str) -> Frame:
        """Run ``message`` through every step for ``queue`` (its full SQS name);
        the frame holds the body and any attributes the steps added."""
        frame = Frame(payload=message.to_payload(), queue=queue,
                      label='task %s (%s)' % (message.task_name, message.task_id))
        frame.headers.update({
            TASK_ID: message.task_id, TASK_NAME: message.task_name,
            ISSUED_AT: str(int(message.issued_at or time.time())),
            UNSETTLED: str(message.unsettled), RETRY_NUM: str(message.retry_num),
            FAILURE_NUM: str(message.failure_num)})
        if message.context:
            frame.headers[CONTEXT] = render_context(message.context)
        for step in self.steps:
            step.encode(frame)
        return frame

    def to_outgoing(self, message: Message, queue: str, delay_sec: int = 0,
                    extra_attributes: Optional[Mapping[str, AttributeValue]] = None
                    ) -> OutgoingMessage:
        """The message ready to send to ``queue``, checked against ``SQS_TASK_SIZE_LIMIT``."""
        frame = self.encode(message, queue)
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

    def reseal(self, frame: Frame, **headers: str) -> str:
        """The opened ``frame`` signed again with the current key, with some
        headers changed; its payload is not decoded, and its issue time and
        queue stay as they were."""
        sealed = dataclasses.replace(frame, headers=dict(frame.headers, **headers), body='',
                                     queue=frame.headers.get(QUEUE, frame.queue))
        for step in self.envelope_steps:
            step.encode(sealed)
        return sealed.body

    # --- in -----------------------------------------------------------------------

    def open(self, body: str, queue: str, check_age: bool = True) -> Frame:
        """Verify a body received on ``queue`` (its full SQS name): the envelope
        steps only. DecodeError (with the body) for a body that is refused.
        Tools that read dead letters of any queue pass ``queue=''`` (no queue
        check) and ``check_age=False``; a worker never does."""
        frame = Frame(body=body, queue=queue, check_age=check_age)
        try:
            for step in reversed(self.envelope_steps):
                step.decode(frame)
        except DecodeError as exc:
            exc.body = body
            raise
        return frame

    def read(self, frame: Frame) -> Message:
        """Decode an opened frame's payload into its Message."""
        try:
            for step in reversed(self.payload_steps):
                step.decode(frame)
            try:
                if frame.legacy:        # no envelope fields: the payload has them
                    message = Message.from_payload(frame.payload)
                    return dataclasses.replace(message, issued_at=message.enqueued_at)
                context = frame.headers.get(CONTEXT)
                message = Message.from_payload(
                    frame.payload, issued_at=frame.issued_at, unsettled=frame.unsettled,
                    context=parse_context(context) if context else {})
            except ValueError as exc:
                raise DecodeError(DecodeError.CORRUPT, str(exc)) from exc
            if message.task_id != frame.task_id or message.task_name != frame.task_name:
                raise DecodeError(DecodeError.CORRUPT, 'payload names another task than the '
                                                       'envelope')
            return message
        except DecodeError as exc:
            exc.body = frame.body
            raise

    def decode(self, body: str, queue: str, check_age: bool = True) -> Message:
        """:meth:`open`, then :meth:`read`."""
        return self.read(self.open(body, queue, check_age))
