"""A received batch: its time budget, and what to do with each message
(docs/explanation/internals-worker.md, "A batch's budget").
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from kale.codec.pipeline import Frame
from kale.events import Settlement
from kale.message import Message
from kale.queue_config import TaskQueue
from kale.speed import build
from kale.task import Task
from kale.transport import ReceivedMessage

#: Seconds kept free at the end of a batch's budget for settling it (less for
#: a task whose time_limit leaves less room below the visibility timeout).
SETTLE_MARGIN_SEC = 1.0

#: Longest time assumed between SQS starting the visibility clock and its
#: answer reaching the worker.
RECEIVE_CLOCK_SLACK_SEC = 1.0


@dataclasses.dataclass
class Opened:
    """A received message whose envelope verified: its task class is known; its
    payload is decoded just before it runs (``message`` is set early only for
    a legacy body, whose task is named in the payload alone)."""

    envelope: Frame
    task_class: type[Task]
    message: Optional[Message] = None

    @property
    def task_id(self) -> str:
        return self.message.task_id if self.message is not None else self.envelope.task_id

    @property
    def unsettled(self) -> int:
        """Earlier deliveries of this task that nobody settled, before this copy."""
        return self.message.unsettled if self.message is not None else self.envelope.unsettled


@dataclasses.dataclass
class Batch:
    """Messages received together from one queue, and their settlements."""

    queue: TaskQueue
    messages: list[ReceivedMessage]
    received_at: float                  # when SQS started the visibility clock (monotonic)
    #: The queue's full SQS name: bodies must be signed for it, copies are.
    sqs_name: str = ''
    settlements: list[Settlement] = dataclasses.field(default_factory=list)
    #: message id -> its verified envelope and task class, filled in before running
    opened: dict[str, Opened] = dataclasses.field(default_factory=dict)
    #: When settling began and last ended (epoch seconds; 0: not yet), for
    #: hooks that report it (the tracing's ``kale.settle`` spans).
    settle_started: float = 0.0
    settle_ended: float = 0.0
    #: Until when a heartbeat has made the running message invisible (monotonic).
    extended_until: float = 0.0
    #: FIFO: groups with a message retried or released in this batch; their
    #: later messages are released, not run, to keep each group in order.
    held_groups: set[str] = dataclasses.field(default_factory=set)
    #: FIFO: the group of the message taken out to run alone after the batch;
    #: its later messages were released for it, and do not hold it back.
    alone_group: Optional[str] = None
    #: How many messages the receive asked for (0: the queue's batch_size).
    asked: int = 0
    #: Received before the worker saw any task of the queue run (a whole
    #: batch, blind): what has not started within the prefetch window is
    #: given back (see :mod:`kale.worker.prefetch`).
    blind: bool = False
    #: When the worker began running its tasks (monotonic; 0: not yet): a
    #: blind batch's window runs from then, not from the receive, so the
    #: worker's own work before its first task gives nothing back.
    started_at: float = 0.0
    #: Found by verifying (see ``Worker.verify``), so that the steps a batch
    #: does not need cost it nothing: the task ids of the opened messages in
    #: order, their task classes, and whether any carries a due time.
    task_ids: list[str] = dataclasses.field(default_factory=list)
    task_classes: set[type[Task]] = dataclasses.field(default_factory=set)
    has_due: bool = False
    #: Whether a message may be a suspect (delivered before, or left
    #: unsettled before): see :mod:`kale.worker.suspects`.
    may_hold_suspect: bool = False
    #: Whether a task of it may outlast its budget (see Batch.is_long): set
    #: once verified; until then assumed.
    has_long: bool = True
    #: Whether the queue is a FIFO queue (asked several times per message).
    fifo: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.fifo = self.queue.fifo

    @property
    def full(self) -> bool:
        """Whether the receive brought all it asked for (the queue may have more)."""
        return len(self.messages) >= (self.asked or self.queue.batch_size)

    def is_long(self, time_limit: float) -> bool:
        """Whether a task may need more than a fresh batch's budget (the
        visibility timeout, less the receive's clock slack and the settle
        margin): it runs alone, with a heartbeat (see
        :mod:`kale.worker.heartbeat`)."""
        return time_limit + SETTLE_MARGIN_SEC > \
            self.queue.visibility_timeout_sec - RECEIVE_CLOCK_SLACK_SEC

    @property
    def deadline(self) -> float:
        """When SQS makes the batch's messages visible to others again (later
        when a heartbeat extended the running one)."""
        return max(self.received_at + self.queue.visibility_timeout_sec, self.extended_until)

    def time_left(self, now: float) -> float:
        return self.deadline - now

    def fits(self, time_limit: float, now: float) -> bool:
        """Whether a task with ``time_limit`` may start at ``now``
        (:func:`fits_budget` with this batch's budget, asked before every run)."""
        visibility = self.queue.visibility_timeout_sec
        deadline = self.received_at + visibility
        if self.extended_until > deadline:
            deadline = self.extended_until
        return time_needed(time_limit, visibility) <= deadline - now

    def part(self, received: ReceivedMessage) -> 'Batch':
        """A batch of one of its messages, with its budget (a pool's job):
        made for every message a worker runs, so built from this one's fields
        (kale.speed.build) rather than through the generated ``__init__``."""
        fields = dict(self.__dict__)
        fields.update(messages=[received], settlements=[],
                      opened={received.message_id: self.opened[received.message_id]},
                      held_groups=set(), task_ids=[], task_classes=set())
        return build(Batch, fields)

    def split_decided(self) -> Optional['Batch']:
        """Take the messages already decided (run, or settled before running)
        out into a batch of their own, to be settled while the rest still runs;
        None when none is decided."""
        if not self.settlements:
            return None
        decided = {id(s.received) for s in self.settlements}
        part = dataclasses.replace(
            self, messages=[m for m in self.messages if id(m) in decided],
            settlements=self.settlements, opened={}, settle_started=0.0, settle_ended=0.0,
            task_ids=[], task_classes=set(), may_hold_suspect=False)
        self.messages = [m for m in self.messages if id(m) not in decided]
        self.settlements = []
        return part

    def unsettled(self) -> list[ReceivedMessage]:
        """Messages with no settlement yet (not reached when the batch stopped)."""
        if not self.settlements:
            return self.messages[:]
        done = {id(s.received) for s in self.settlements}
        return [m for m in self.messages if id(m) not in done]


def visibility_clock_start(call_started: float, call_ended: float) -> float:
    """When the visibility clock of a batch received by this call started."""
    return max(call_started, call_ended - RECEIVE_CLOCK_SLACK_SEC)


def settle_margin(time_limit: float, visibility_timeout_sec: float) -> float:
    """Room kept for settling after a run: SETTLE_MARGIN_SEC, or half the gap
    between time_limit and the visibility timeout when that is smaller, so a
    task that fits its queue at all fits a batch fresh from a short poll."""
    margin = (visibility_timeout_sec - time_limit) / 2.0
    if margin > SETTLE_MARGIN_SEC:
        return SETTLE_MARGIN_SEC
    return margin if margin > 0.0 else 0.0


def fits_budget(time_limit: float, time_left: float, visibility_timeout_sec: float) -> bool:
    """A run of up to ``time_limit`` seconds, then settling, must end before the budget does."""
    return time_needed(time_limit, visibility_timeout_sec) <= time_left


@functools.lru_cache(maxsize=1024)
def time_needed(time_limit: float, visibility_timeout_sec: float) -> float:
    """A run's time limit and its settle margin (asked once a run, so kept:
    a worker's tasks have a few time limits, its queues a few timeouts)."""
    return time_limit + settle_margin(time_limit, visibility_timeout_sec)


#: Least time a batch's budget must have left for a copy to be sent: the copy
#: and the delete of its original must both land before SQS may deliver the
#: original again.
COPY_MIN_SEC = 0.5


class SettleDeferred(Exception):
    """Settling met an outage with retrying off: resume the batch where waiting
    is allowed (see :meth:`kale.worker.consumer.Consumer.settle`)."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause
