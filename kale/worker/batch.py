"""A fetched batch: its time budget, and what to do with each message.

A batch is received with the queue's visibility timeout, so every message in
it must be settled before ``received_at + visibility_timeout_sec`` or SQS
hands it to another worker. A task may start only while its whole
``time_limit`` (plus a margin for settling) still fits in what is left.

``received_at`` is when SQS started the messages' visibility clock, which is
some time during the receive call. A long poll can wait up to 20 s before
messages arrive, and SQS answers as soon as it has them, so the clock is
taken to start at most ``RECEIVE_CLOCK_SLACK_SEC`` before the answer came
back (and never before the call began).
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional

from kale.codec.pipeline import Frame
from kale.message import Message
from kale.queue_config import TaskQueue
from kale.task import Task
from kale.transport import OutgoingMessage, ReceivedMessage

#: Seconds kept free at the end of a batch's budget for settling it (less for
#: a task whose time_limit leaves less room below the visibility timeout).
SETTLE_MARGIN_SEC = 1.0

#: Longest time assumed between SQS starting the visibility clock and its
#: answer reaching the worker.
RECEIVE_CLOCK_SLACK_SEC = 1.0


class Outcome(enum.Enum):
    """What settling does with one received message."""

    SUCCEEDED = 'succeeded'      # delete
    SKIPPED = 'skipped'          # should_run_task said no: delete
    CANCELLED = 'cancelled'      # a hook's cancelled_tasks named it: delete, unrun
    RETRY = 'retry'              # send the retry copy, then delete
    DEAD_LETTER = 'dead_letter'  # send the dead-letter copy, then delete
    RELEASE = 'release'          # not run: send a fresh copy (visible at once), then delete

    # Members compare by identity: hashing them by identity as well keeps the
    # per-message lookups keyed by outcome in C (Enum's own hash is Python).
    __hash__ = object.__hash__


#: Outcomes that leave a FIFO message in its group, holding back the rest.
HOLDS_GROUP = (Outcome.RETRY, Outcome.RELEASE)


@dataclasses.dataclass
class Settlement:
    """The fate of one received message, decided by running (or not running) it."""

    received: ReceivedMessage
    outcome: Outcome
    message: Optional[Message] = None
    copy: Optional[OutgoingMessage] = None     # the fresh, retry or dead-letter copy
    reason: str = ''
    task: Any = None
    exception: Optional[BaseException] = None
    duration_sec: float = 0.0
    settled: bool = False                      # its SQS requests succeeded
    copied: bool = False                       # its copy was sent (or needs none)
    #: The verified envelope, when the body passed verification.
    envelope: Optional[Frame] = None
    #: On a FIFO queue, a retry or release keeps the message, invisible for
    #: this many seconds, instead of sending a copy (which would go to the
    #: back of its group).
    hold_sec: Optional[int] = None
    #: What run_task returned (SUCCEEDED only), for hooks such as the records'.
    result: Any = None
    #: Its copy was not sent because the batch's visibility timeout had ended
    #: (or nearly): SQS may have delivered the original again, so the message
    #: is left for SQS to deliver, once.
    lapsed: bool = False

    @property
    def retry_delay_sec(self) -> int:
        """Seconds until a retry's next attempt: its copy's delay or, on a
        FIFO queue, how long its message is held invisible."""
        return self.copy.delay_sec if self.copy is not None else (self.hold_sec or 0)

    @property
    def verified(self) -> bool:
        """Whether the message's signature was verified (its task id and name
        can be trusted). Unverified messages are known by their SQS id only."""
        return self.message is not None or self.envelope is not None

    @property
    def task_id(self) -> str:
        """The task id, or ``message:<SQS message id>`` for an unverified message."""
        if self.message is not None:
            return self.message.task_id
        if self.envelope is not None and self.envelope.task_id:
            return self.envelope.task_id
        return 'message:' + self.received.message_id

    @property
    def task_name(self) -> str:
        """The task's path, or '?' for an unverified message."""
        if self.message is not None:
            return self.message.task_name
        if self.envelope is not None and self.envelope.task_name:
            return self.envelope.task_name
        return '?'


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
        return fits_budget(time_limit, deadline - now, visibility)

    def split_decided(self) -> Optional['Batch']:
        """Take the messages already decided (run, or settled before running)
        out into a batch of their own, to be settled while the rest still runs;
        None when none is decided."""
        if not self.settlements:
            return None
        decided = {id(s.received) for s in self.settlements}
        part = dataclasses.replace(
            self, messages=[m for m in self.messages if id(m) in decided],
            settlements=self.settlements, opened={}, settle_started=0.0, settle_ended=0.0)
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
    return time_limit + settle_margin(time_limit, visibility_timeout_sec) <= time_left
