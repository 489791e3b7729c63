"""The codec's parts: the :class:`Frame` that flows through its steps, the
:class:`Step` protocol, and the :class:`Codec` that runs them in order, the
envelope steps apart from the payload steps (docs/explanation/internals-transport.md,
"The codec").
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, Optional, Protocol, Sequence
from urllib.parse import parse_qsl, urlencode

from kale import speed
from kale.exceptions import DecodeError, MessageTooLargeError
from kale.message import (
    ATTR_DEAD_OF,
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
PUBLISHED_AT = 't'        # when the task was first published (whole seconds since the epoch)
QUEUE = 'q'            # the SQS queue the body was signed for
UNSETTLED = 'u'        # deliveries that ended with nobody settling the message
RETRY_NUM = 'r'
FAILURE_NUM = 'f'
SIGNING_KEY = 'k'      # id of the key that signed it
SERIALIZER = 's'
COMPRESSION = 'c'
ENCRYPTION = 'e'       # id of the key that encrypted it
ENCODING = 'd'         # 't': data travels as text; 'b': as base64
# The signed pointer to a payload kept in S3 (kale.codec.offload); the body then has no data.
PAYLOAD_BUCKET = 'b'   # the S3 bucket
PAYLOAD_KEY = 'o'      # the object's key, under kale-payloads/
PAYLOAD_SIZE = 'l'     # the object's length in bytes
PAYLOAD_SHA256 = 'h'   # the object's SHA-256, in hex
CONTEXT = 'x'          # the message's context (a trace context), form-encoded
DEAD_OF = 'a'          # a dead run: the id of the task whose dead letter it handles
DEAD_ERROR = 'w'       # a dead run: that task's final error, one line
# A subscriber's copy of a topic event (kale.topics): the event's task id and
# name, as its payload has them, while the task id and name headers are the copy's.
EVENT = 'E'
# When a task that waits longer than SQS's 15-minute delay is due (epoch
# seconds, to the millisecond; see kale.delays): an earlier copy is sent on unrun.
DUE_AT = 'D'


def parse_context(text: str) -> dict[str, str]:
    """The context in a verified envelope's header (``name=value&...``, form-encoded)."""
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
    #: On the way out, the SQS message attributes the message will carry: the
    #: task's own and the caller's, then any a step adds (not signed, so never
    #: trusted on the way in).
    attributes: dict[str, AttributeValue] = dataclasses.field(default_factory=dict)
    #: Who the frame is about, for error messages ('task NAME (ID)' or 'message').
    label: str = 'message'
    #: A body in the format before ``kale2`` (only with ACCEPT_LEGACY_MESSAGES):
    #: it has no task, time or queue headers.
    legacy: bool = False
    #: On the way in: whether the envelope steps check the publish time.
    check_age: bool = True
    #: On the way in: the topics (their signed names) the receiving queue
    #: subscribes to; a body signed for one of them is accepted there.
    topics: frozenset[str] = frozenset()

    def clone(self) -> 'Frame':
        """A clone whose headers can change without touching this frame's (a
        field copy, see kale.speed: :func:`dataclasses.replace` costs several
        times more on the worker's path)."""
        twin = speed.build(Frame, self.__dict__)
        twin.headers = dict(self.headers)
        return twin

    def for_subscriber(self, task_id: str, task_name: str) -> 'Frame':
        """A verified topic event's envelope as ``task_name``'s copy of it,
        under ``task_id``: copies resealed from it keep being that copy."""
        twin = self.clone()
        if EVENT not in twin.headers:
            twin.headers[EVENT] = '%s %s' % (self.task_id, self.task_name)
        twin.headers[TASK_ID], twin.headers[TASK_NAME] = task_id, task_name
        twin.label = 'task %s (%s)' % (task_name, task_id)
        return twin

    @property
    def task_name(self) -> str:
        """The task path from the verified headers ('' for a legacy body)."""
        return self.headers.get(TASK_NAME, '')

    @property
    def task_id(self) -> str:
        return self.headers.get(TASK_ID, '')

    @property
    def published_at(self) -> float:
        return float(self.headers.get(PUBLISHED_AT, 0) or 0)

    @property
    def unsettled(self) -> int:
        return int(self.headers.get(UNSETTLED, 0) or 0)

    @property
    def due_at(self) -> float:
        """When the task is due (epoch seconds; 0: no wait past SQS's own delay)."""
        return float(self.headers.get(DUE_AT, 0) or 0)

    @property
    def dead_of(self) -> str:
        """For a dead run, the id of the task whose dead letter it handles; else ''."""
        return self.headers.get(DEAD_OF, '')

    @property
    def offloaded(self) -> bool:
        """Whether the payload is kept in S3 and the envelope points at it."""
        return PAYLOAD_KEY in self.headers

    def message_attributes(self) -> dict[str, AttributeValue]:
        """The SQS attributes of the message this verified envelope holds, as
        publishing set them (a worker does not receive them: they are unsigned)."""
        if self.legacy:
            return {}
        attributes: dict[str, AttributeValue] = {
            ATTR_TASK_ID: self.task_id, ATTR_TASK_NAME: self.task_name,
            ATTR_RETRY_NUM: int(self.headers.get(RETRY_NUM, 0) or 0),
            ATTR_FAILURE_NUM: int(self.headers.get(FAILURE_NUM, 0) or 0)}
        if self.dead_of:
            attributes[ATTR_DEAD_OF] = self.dead_of
        return attributes


#: A received body's frame before the envelope steps, Frame's defaults, built
#: without Frame's __init__ (see kale.speed; Codec.open gives it its own headers).
_RECEIVED: dict[str, Any] = {field.name: field.default for field in dataclasses.fields(Frame)}


class Step(Protocol):
    """One stage of the codec: ``encode`` on the way out, ``decode`` (DecodeError
    for a body it refuses) on the way in, in reverse order, both changing the
    frame in place; one keeping data outside the body has ``discard(frame)`` too.
    A payload step's ``plain_header = (header, value)`` says its ``decode`` does
    nothing while ``headers.get(header, value) == value``: the codec skips the call."""

    name: str

    def encode(self, frame: Frame) -> None:
        ...

    def decode(self, frame: Frame) -> None:
        ...


class Codec:
    """Encodes messages into outgoing SQS messages and decodes bodies back."""

    def __init__(self, payload_steps: Sequence[Step], envelope_steps: Sequence[Step], size_limit: int):
        self.payload_steps = list(payload_steps)
        self.envelope_steps = list(envelope_steps)
        self.size_limit = size_limit
        #: The payload steps in decoding order, with their plain_header (None: always called).
        self._decoding: list[tuple[Optional[tuple[str, Optional[str]]], Step]] = [
            (getattr(step, 'plain_header', None), step) for step in reversed(self.payload_steps)]

    @property
    def steps(self) -> list[Step]:
        """Every step, in the order they run on the way out."""
        return self.payload_steps + self.envelope_steps

    # --- out --------------------------------------------------------------------

    def encode(self, message: Message, queue: str,
               extra_attributes: Optional[Mapping[str, AttributeValue]] = None) -> Frame:
        """Run ``message`` through every step for ``queue`` (its full SQS name);
        the frame holds the body and the message's attributes: the task's,
        ``extra_attributes``, and any the steps added."""
        frame = Frame(payload=message.to_payload(), queue=queue,
                      label='task %s (%s)' % (message.task_name, message.task_id))
        frame.attributes.update(message.attributes())
        frame.attributes.update(extra_attributes or {})
        frame.headers.update({
            TASK_ID: message.task_id, TASK_NAME: message.task_name,
            PUBLISHED_AT: str(int(message.published_at or time.time())), UNSETTLED: str(message.unsettled),
            RETRY_NUM: str(message.retry_num), FAILURE_NUM: str(message.failure_num)})
        if message.context:
            frame.headers[CONTEXT] = urlencode(sorted(message.context.items()))
        if message.dead_of:
            frame.headers[DEAD_OF] = message.dead_of
            frame.headers[DEAD_ERROR] = message.dead_error
        if message.due_at:
            frame.headers[DUE_AT] = '%.3f' % message.due_at
        for step in self.steps:
            step.encode(frame)
        return frame

    def to_outgoing(self, message: Message, queue: str, delay_sec: int = 0,
                    extra_attributes: Optional[Mapping[str, AttributeValue]] = None) -> OutgoingMessage:
        """The message ready to send to ``queue``, checked against
        ``SQS_TASK_SIZE_LIMIT`` (after its payload went to S3, if it did)."""
        frame = self.encode(message, queue, extra_attributes)
        return self._checked(frame, message, frame.body, frame.attributes, extra_attributes, delay_sec)

    def _checked(self, frame: Frame, message: Message, body: str, attributes: Mapping[str, AttributeValue],
                 extra: Optional[Mapping[str, AttributeValue]], delay_sec: int) -> OutgoingMessage:
        """The message of ``body`` and ``attributes`` (``extra`` over them) within SQS_TASK_SIZE_LIMIT."""
        outgoing = OutgoingMessage(body, dict(attributes, **(extra or {})), delay_sec)
        size = outgoing.size()
        if size > self.size_limit:
            hint = ('even with its payload in S3' if frame.offloaded
                    else 'set PAYLOAD_BUCKET to keep payloads that big in S3')
            raise MessageTooLargeError(
                'task %s (%s): encoded message is %d bytes, over SQS_TASK_SIZE_LIMIT of %d bytes '
                '(%s)' % (message.task_name, message.task_id, size, self.size_limit, hint))
        return outgoing

    def reissue(self, envelope: Optional[Frame], message: Message, queue: str, delay_sec: int = 0,
                extra_attributes: Optional[Mapping[str, AttributeValue]] = None) -> OutgoingMessage:
        """A copy of a received message to send again to ``queue`` (a retry, a
        dead letter, a redriven one) with ``message``'s counts and publish time:
        encoded afresh, or its ``envelope`` resealed when that points at a payload in S3."""
        if envelope is None or not envelope.offloaded:
            return self.to_outgoing(message, queue, delay_sec, extra_attributes)
        headers = {RETRY_NUM: str(message.retry_num), FAILURE_NUM: str(message.failure_num),
                   UNSETTLED: str(message.unsettled),
                   PUBLISHED_AT: str(int(message.published_at or time.time()))}
        if message.due_at:              # a retry's long delay (kale.Retry)
            headers[DUE_AT] = '%.3f' % message.due_at
        return self._checked(envelope, message, self._seal(envelope, queue, headers),
                             message.attributes(), extra_attributes, delay_sec)

    def discard(self, frame: Frame) -> None:
        """Delete what the steps keep outside the body of an opened ``frame``
        (its payload's S3 object), once its task is done. Errors are
        :class:`~kale.exceptions.PayloadStoreError`."""
        for step in self.steps:
            discard = getattr(step, 'discard', None)
            if discard is not None:
                discard(frame)

    def reseal(self, frame: Frame, **headers: str) -> str:
        """The opened ``frame`` signed again with the current key, with some
        headers changed; its payload is not decoded, and its publish time and
        queue stay as they were."""
        return self._seal(frame, frame.headers.get(QUEUE, frame.queue), headers)

    def _seal(self, frame: Frame, queue: str, headers: Mapping[str, str]) -> str:
        sealed = dataclasses.replace(frame, headers=dict(frame.headers, **headers), body='', queue=queue)
        for step in self.envelope_steps:
            step.encode(sealed)
        return sealed.body

    # --- in -----------------------------------------------------------------------

    def open(self, body: str, queue: str, check_age: bool = True,
             topics: frozenset[str] = frozenset()) -> Frame:
        """Verify a body received on ``queue`` (its full SQS name), which
        subscribes to ``topics`` (their signed names): the envelope steps only;
        DecodeError (with the body) for one refused. Tools reading dead letters
        of any queue pass ``queue=''`` and ``check_age=False``; a worker never does."""
        frame = speed.build(Frame, dict(_RECEIVED, headers={}, attributes={}, body=body,
                                        queue=queue, check_age=check_age, topics=topics))
        try:
            for step in reversed(self.envelope_steps):
                step.decode(frame)
        except DecodeError as exc:
            exc.body = body
            raise
        return frame

    def read(self, envelope: Frame) -> Message:
        """Decode an opened frame's payload (fetched first when in S3:
        PayloadStoreError) into its Message, the envelope's signed counts over the payload's."""
        # The payload steps change the payload, never the headers: the twin
        # shares the envelope's headers (no copy of them per run).
        frame = speed.build(Frame, envelope.__dict__)
        headers = frame.headers
        try:
            for plain, step in self._decoding:
                if plain is None or headers.get(plain[0], plain[1]) != plain[1]:
                    step.decode(frame)
            try:
                if frame.legacy:        # no envelope fields: the payload has them
                    message = Message.from_payload(frame.payload)
                    return dataclasses.replace(message, published_at=message.sent_at)
                message = Message.from_payload(frame.payload, envelope_fields(frame.headers))
            except ValueError as exc:
                raise DecodeError(DecodeError.CORRUPT, str(exc)) from exc
            event = headers.get(EVENT)
            named = tuple(event.split(' ', 1)) if event else (
                headers.get(TASK_ID, ''), headers.get(TASK_NAME, ''))
            if (message.task_id, message.task_name) != named:
                raise DecodeError(DecodeError.CORRUPT, 'payload names another task than the envelope')
            if event:                   # a subscriber's copy of an event
                message = dataclasses.replace(message, task_id=headers[TASK_ID], task_name=headers[TASK_NAME])
            return message
        except DecodeError as exc:
            exc.body = frame.body
            raise

    def decode(self, body: str, queue: str, check_age: bool = True) -> Message:
        """:meth:`open`, then :meth:`read`."""
        return self.read(self.open(body, queue, check_age))


def envelope_fields(headers: Mapping[str, str]) -> dict[str, Any]:
    """The Message fields a verified envelope carries (a body signed without
    counts leaves the payload's); ValueError for a count that is not one."""
    context = headers.get(CONTEXT)
    fields: dict[str, Any] = {
        'published_at': float(headers.get(PUBLISHED_AT, 0) or 0),
        'unsettled': int(headers.get(UNSETTLED, 0) or 0),
        'context': parse_context(context) if context else {}}
    dead_of = headers.get(DEAD_OF)
    if dead_of:
        fields['dead_of'], fields['dead_error'] = dead_of, headers.get(DEAD_ERROR, '')
    due_at = headers.get(DUE_AT)
    if due_at:
        fields['due_at'] = float(due_at)
    for field, header in _COUNT_HEADERS:
        value = headers.get(header)
        if value is not None:
            if not (value.isascii() and value.isdigit()):
                raise ValueError('envelope header %s=%r is not a count' % (header, value))
            fields[field] = int(value)
    return fields


_COUNT_HEADERS = (('retry_num', RETRY_NUM), ('failure_num', FAILURE_NUM))
