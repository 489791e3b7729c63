"""The vocabulary every layer shares: what became of a received message
(:class:`Outcome`, with its name in records, metrics, traces and hooks), the
:class:`Settlement` that carries it, and the id of this process.

At the bottom of the layers: it imports nothing of Kale's at run time, so
the worker, the records, the metrics and the tracing all read one table
instead of keeping string tables of their own.
"""
from __future__ import annotations

import dataclasses
import enum
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Optional

from kale import speed
from kale.statuses import TaskStatus

if TYPE_CHECKING:
    from kale.codec.pipeline import Frame
    from kale.message import Message
    from kale.transport import OutgoingMessage, ReceivedMessage


class Outcome(enum.Enum):
    """What settling does with one received message."""

    SUCCEEDED = 'succeeded'      # delete
    SKIPPED = 'skipped'          # should_run_task said no: delete
    CANCELLED = 'cancelled'      # a hook's cancelled_tasks named it: delete, unrun
    RETRY = 'retry'              # send the retry copy, then delete
    DEAD_LETTER = 'dead_letter'  # send the dead-letter copy, then delete
    RELEASE = 'release'          # not run: send a fresh copy (visible at once), then delete
    DUPLICATE = 'duplicate'      # another delivery of the task is in the batch: delete, unrun
    WAITING = 'waiting'          # before its due time (kale.delays): send it on delayed, then delete

    __hash__ = speed.identity_hash       # see kale.speed for the figure

    @property
    def record_status(self) -> TaskStatus:
        """The task record's status after it (a released task that ran is queued again)."""
        return _NAMES[self].record_status

    @property
    def metric_label(self) -> str:
        """The ``outcome`` label of ``kale_tasks_total``."""
        return _NAMES[self].metric_label

    @property
    def settle_operation(self) -> str:
        """What settling does with the message (the ``kale.settle`` span's operation)."""
        return _NAMES[self].settle_operation

    @property
    def hook_name(self) -> str:
        """The WorkerHooks method called for it once settled."""
        return _NAMES[self].hook_name

    @property
    def run_failed(self) -> bool:
        """Whether its run failed (the span's status is an error)."""
        return _NAMES[self].run_failed


@dataclasses.dataclass(frozen=True)
class OutcomeNames:
    """One outcome's name in each layer that shows it."""

    record_status: TaskStatus
    metric_label: str
    settle_operation: str
    hook_name: str
    run_failed: bool = False


#: Every outcome's names: the one table records, metrics, tracing and the
#: hooks read (a new Outcome without a row here fails the suite).
_NAMES: dict[Outcome, OutcomeNames] = {
    Outcome.SUCCEEDED: OutcomeNames(TaskStatus.SUCCEEDED, 'succeeded', 'delete',
                                    'on_task_succeeded'),
    Outcome.SKIPPED: OutcomeNames(TaskStatus.SUCCEEDED, 'skipped', 'delete', 'on_task_succeeded'),
    Outcome.CANCELLED: OutcomeNames(TaskStatus.CANCELLED, 'cancelled', 'delete',
                                    'on_task_cancelled'),
    Outcome.RETRY: OutcomeNames(TaskStatus.SCHEDULED, 'retried', 'retry', 'on_task_retried',
                                run_failed=True),
    Outcome.DEAD_LETTER: OutcomeNames(TaskStatus.FAILED, 'dead_lettered', 'dead_letter',
                                      'on_task_dead_lettered', run_failed=True),
    Outcome.RELEASE: OutcomeNames(TaskStatus.QUEUED, 'released', 'release', 'on_task_released'),
    # The task's record is left to the delivery that runs.
    Outcome.DUPLICATE: OutcomeNames(TaskStatus.QUEUED, 'duplicate', 'delete',
                                    'on_task_duplicate'),
    # Not run, and not a retry: its record stays scheduled, with its due time.
    Outcome.WAITING: OutcomeNames(TaskStatus.SCHEDULED, 'waiting', 'wait', 'on_task_waiting'),
}


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
    #: DEAD_LETTER of a task that handles its dead letters: the dead run sent
    #: to the queue's dead-run queue in place of the dead-letter copy (None
    #: again when it could not be sent and the copy went instead).
    dead_run: Optional[Message] = None

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


_identity: tuple[int, str, float] = (0, '', 0.0)


def process_identity() -> tuple[str, float]:
    """This process's id and when it was first asked for (epoch seconds).

    The id reads as host, pid and that start time, ``vm:29984@2026-11-24T10:15:03Z``;
    it names the process in log records (``worker``), in task records (the
    worker that ran each attempt) and in the workers' own rows, so the three
    join. A forked child gets its own on first use.
    """
    global _identity
    pid = os.getpid()
    if _identity[0] != pid:
        started = time.time()
        # The host name is cut so the id fits the records' columns (160).
        _identity = (pid, '%s:%d@%s' % (socket.gethostname()[:120], pid, time.strftime(
            '%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))), started)
    return _identity[1], _identity[2]
