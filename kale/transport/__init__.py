"""The transport contract: what Kale needs from a queue service, on opaque text,
with full SQS queue names (prefix included), implemented over boto3 and in memory
(docs/explanation/internals-transport.md, "The AWS modules"); the fields of SQS
requests made from messages, and how they are grouped into batch requests.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence, Union

AttributeValue = Union[str, int]

#: Most entries SQS takes in one batch request (and messages in one receive).
MAX_BATCH_ENTRIES = 10
#: Longest delay SQS allows on a message, in seconds.
MAX_DELAY_SEC = 900
#: Longest long poll (WaitTimeSeconds) SQS allows on a receive, in seconds.
MAX_LONG_POLL_SEC = 20
#: Longest a received message may stay invisible, from its receive, in seconds.
MAX_VISIBILITY_SEC = 12 * 3600
#: What the name of a FIFO queue ends with (SQS requires it).
FIFO_SUFFIX = '.fifo'
#: How long a FIFO queue remembers a deduplication id, in seconds.
FIFO_DEDUP_WINDOW_SEC = 300


def is_fifo(queue: str) -> bool:
    """Whether the SQS queue named ``queue`` is a FIFO queue."""
    return queue.endswith(FIFO_SUFFIX)


@dataclasses.dataclass(frozen=True)
class OutgoingMessage:
    """A body to send, with message attributes and a delay (whole seconds)."""

    body: str
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)
    delay_sec: int = 0
    #: On a FIFO queue: the message group (required) and the deduplication id.
    #: On a standard queue a group is the message's tenant (see kale.publish_checks).
    group_id: str = ''
    dedup_id: str = ''

    def size(self) -> int:
        """Bytes SQS counts against its size limits: body plus attributes."""
        total = len(self.body.encode('utf-8'))
        for name, value in self.attributes.items():
            kind = 'Number' if isinstance(value, int) else 'String'
            total += len(name) + len(kind) + len(str(value).encode('utf-8'))
        return total


def message_fields(message: OutgoingMessage) -> dict[str, Any]:
    """The request fields of one message (SendMessage, or a batch entry)."""
    fields: dict[str, Any] = {'MessageBody': message.body}
    # FIFO queues (whose messages all carry a deduplication id) take no
    # per-message delay; a fair queue's message carries a group and a delay.
    if message.delay_sec or not message.dedup_id:
        fields['DelaySeconds'] = int(message.delay_sec)
    if message.attributes:
        fields['MessageAttributes'] = {
            name: {'DataType': 'Number' if isinstance(value, int) else 'String',
                   'StringValue': str(value)} for name, value in message.attributes.items()}
    if message.group_id:
        fields['MessageGroupId'] = message.group_id
    if message.dedup_id:
        fields['MessageDeduplicationId'] = message.dedup_id
    return fields


def split_batches(messages: Sequence[OutgoingMessage], byte_limit: int,
                  max_entries: int = MAX_BATCH_ENTRIES) -> list[list[int]]:
    """Message indexes in requests of ``max_entries`` and ``byte_limit`` at most (or a message alone)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index, message in enumerate(messages):
        message_size = message.size()
        if current and (len(current) == max_entries or size + message_size > byte_limit):
            groups.append(current)
            current, size = [], 0
        current.append(index)
        size += message_size
    if current:
        groups.append(current)
    return groups


@dataclasses.dataclass(frozen=True)
class ReceivedMessage:
    """A message as received: its body, attributes and receive bookkeeping."""

    message_id: str
    receipt_handle: str
    body: str
    attributes: Mapping[str, str]
    receive_count: int = 1
    #: The message group of a message received from a FIFO queue (a
    #: standard queue's message sent with one: its tenant, see kale.publish_checks).
    group_id: str = ''
    #: Seconds from this message's first receive to this one (None when the
    #: endpoint did not say). With the receive count it bounds how many earlier
    #: deliveries were held to the end of their visibility timeout.
    since_first_receive_sec: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class QueueCounts:
    """Approximate message counts of one queue."""

    visible: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


@dataclasses.dataclass(frozen=True)
class VisibilityChange:
    """A new visibility timeout for one received message (0 releases it)."""

    receipt_handle: str
    timeout_sec: int


class Transport(Protocol):
    """Queue operations Kale performs. Errors are :class:`kale.exceptions.SQSError`."""

    #: Whether the queues live on this machine (an embedded or in-memory
    #: endpoint), where development signing keys are allowed.
    local: bool

    def ensure_queue(self, name: str, visibility_timeout_sec: int,
                     dead_letter_queue: Optional[str], max_receive_count: int) -> None:
        """Create ``name`` (and its dead-letter queue, with a redrive policy) if
        missing; a name ending in ``.fifo`` makes a FIFO queue, whose
        dead-letter queue must be FIFO too. Messages sent to a FIFO queue need
        a group id and a deduplication id, and no delay."""

    def queue_exists(self, name: str) -> bool:
        """Whether the queue exists."""

    def send(self, queue: str, message: OutgoingMessage) -> str:
        """Send one message; returns its message id."""

    def send_batch(self, queue: str, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send many messages in as few requests as the limits allow; returns ids in order."""

    def receive(self, queue: str, max_messages: int, wait_sec: int, visibility_timeout_sec: int,
                attribute_names: Sequence[str] = ('All',)) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` (1..10), long polling up to ``wait_sec``,
        with the message attributes named (``'All'``, or none: ``()``)."""

    def delete_batch(self, queue: str, receipt_handles: Sequence[str]) -> list[str]:
        """Delete messages; returns the receipt handles that could not be deleted."""

    def change_visibility_batch(self, queue: str, changes: Sequence[VisibilityChange]) -> list[str]:
        """Change visibility timeouts; returns the receipt handles that failed."""

    def counts(self, queue: str) -> QueueCounts:
        """Approximate visible, in-flight and delayed counts."""

    def purge(self, queue: str) -> None:
        """Delete every message in the queue."""
