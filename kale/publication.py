"""What a publish is made of: the call as given (:class:`PublishCall`), the
checked draft of its messages (:class:`Draft`), what the publish hooks see
(:class:`Publication`), and where it goes (:class:`Sender`, or a
:class:`KeepingSender` that keeps it for a later send: the outbox)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

from kale.message import Message
from kale.queue_config import TaskQueue
from kale.transport import AttributeValue, OutgoingMessage

if TYPE_CHECKING:
    from kale.task import Task


class Sender(Protocol):
    """Where the publisher sends: :class:`kale.broker.Broker` (over SQS, or
    the in-memory transport), or the eager runner."""

    def sqs_name(self, queue: TaskQueue) -> str:
        """The queue's full SQS name, which each body is signed for."""

    def send(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send the messages; returns their SQS message ids."""


@runtime_checkable
class KeepingSender(Protocol):
    """A sender that keeps what it is given for a later send (the outbox), and
    decides unique tasks itself when it sends."""

    def sqs_name(self, queue: TaskQueue) -> str:
        """The queue's full SQS name, which each body is signed for."""

    def keep(self, publication: 'Publication', outgoing: list[OutgoingMessage]) -> None:
        """Keep the encoded messages of ``publication``; nothing is sent."""


@dataclasses.dataclass(slots=True)
class PublishCall:
    """What one ``publish``/``publish_batch`` call asks, as given."""

    task_class: type['Task']
    app_data: Any
    calls: Sequence[Any]
    delay_sec: Any = 0
    group_id: Optional[str] = None
    dedup_id: Optional[str] = None
    labels: Optional[Mapping[str, str]] = None
    queue_name: Optional[str] = None
    #: Ids given beforehand, one per call (a workflow's nodes, a retry).
    task_ids: Optional[Sequence[str]] = None
    #: Context every message carries (Kale's own tasks' proof).
    context: Optional[Mapping[str, str]] = None
    unique_for_sec: Optional[float] = None
    eta: Any = None
    #: Runs each task had before, one per call (a workflow node run again).
    retry_nums: Optional[Sequence[int]] = None


@dataclasses.dataclass(slots=True)
class Draft:
    """A call checked and its messages built, not yet encoded: the first
    stage's product, which the unique claim may thin out."""

    name: str
    queue: TaskQueue
    delay: int
    due_at: Optional[float]
    labels: dict[str, str]
    pairs: list[tuple[tuple, dict]]
    messages: list[Message]
    #: On a fair queue, each message's tenant.
    groups: list[str]

    def keep_only(self, numbers: list[int]) -> None:
        """Keep the messages (and their calls and tenants) numbered so."""
        self.messages = [self.messages[n] for n in numbers]
        self.pairs = [self.pairs[n] for n in numbers]
        self.groups = [self.groups[n] for n in numbers] if self.groups else self.groups


@dataclasses.dataclass
class Publication:
    """One ``publish`` or ``publish_batch`` call, as publish hooks see it."""

    task_class: type['Task']
    queue: TaskQueue
    messages: list[Message]
    delay_sec: int
    #: Extra SQS attributes for each message (hooks may add to them).
    attributes: list[dict[str, AttributeValue]]
    #: Set for ``after_publish`` when encoding or sending failed.
    error: Optional[BaseException] = None
    #: The queue's full SQS name (with QUEUE_PREFIX).
    sqs_name: str = ''
    #: Context each message carries in its signed envelope (hooks may add to
    #: it, e.g. a trace context); the worker sees it as ``message.context``.
    context: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: The SQS message ids, in order, once sent (for ``after_publish``).
    message_ids: list[str] = dataclasses.field(default_factory=list)
    #: The message group, on a FIFO queue (the tenant given, on a fair queue).
    group_id: str = ''
    #: Each message's labels, for the records (they do not travel in it).
    labels: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: Encoded for a later send (the outbox): ``after_publish`` sees no
    #: message ids, and whatever sends it writes the records.
    deferred: bool = False
    #: When the tasks are due, for a wait over SQS's 15 minutes (kale.delays).
    due_at: Optional[float] = None

    @property
    def task_ids(self) -> list[str]:
        return [m.task_id for m in self.messages]
