"""The vocabulary every layer shares: the :class:`Outcome` of a received message,
the :class:`Settlement` that carries it, and the id of this process
(docs/explanation/internals-top.md, "Outcomes")."""
from __future__ import annotations

import dataclasses
import enum
import logging
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


class Settle(enum.Enum):
    """What settling does with a message, by kind (an outcome's ``settle``)."""

    DELETE = 'delete'            # delete it; nothing is sent
    COPY = 'copy'                # send its copy (delayed: a retry, a wait), then delete it
    RELEASE = 'release'          # a fresh copy visible at once (late: made visible), then delete
    DEAD_LETTER = 'dead_letter'  # its dead-letter copy (or its dead run), then delete it

    __hash__ = speed.identity_hash       # keyed by kind once a message (see kale.speed)


class Outcome(enum.Enum):
    """What became of one received message. Its row in :data:`OUTCOMES` says
    what settling, the records, metrics, traces, hooks and logs do with it;
    each member carries it (``row``) and its ``settle``, ``record_status`` (a
    released task that ran is queued again), ``metric_label`` (of
    ``kale_tasks_total``), ``settle_operation`` (of the ``kale.settle`` span),
    ``hook_name`` (the WorkerHooks method called once settled) and
    ``run_failed`` (the span's status is an error)."""

    SUCCEEDED = 'succeeded'
    SKIPPED = 'skipped'          # should_run_task said no
    CANCELLED = 'cancelled'      # a hook's cancelled_tasks named it: unrun
    RETRY = 'retry'
    DEAD_LETTER = 'dead_letter'
    RELEASE = 'release'          # not run: back to the queue
    DUPLICATE = 'duplicate'      # another delivery of the task is in the batch: unrun
    WAITING = 'waiting'          # before its due time (kale.delays): sent on, delayed

    __hash__ = speed.identity_hash       # see kale.speed for the figure

    # Set from OUTCOMES below (plain attributes: read for every message).
    row: OutcomeRow
    settle: Settle
    record_status: TaskStatus
    metric_label: str
    settle_operation: str
    hook_name: str
    run_failed: bool


@dataclasses.dataclass(frozen=True)
class OutcomeRow:
    """One outcome: what settling does, and its name and words in each layer
    that shows it. A line is a %-format over the fields ``where``,
    ``duration``, ``reason``, ``failure``, ``delay`` and ``dead_run``."""

    settle: Settle
    record_status: TaskStatus
    metric_label: str
    settle_operation: str
    hook_name: str
    #: The log line's level, and the line.
    level: int
    line: str
    run_failed: bool = False
    #: Its task is over: an offloaded payload's S3 object goes with the message.
    task_done: bool = False
    #: On a FIFO queue its message stays in its group, invisible, holding the rest back.
    holds_group: bool = False
    #: The line when its copy was not sent before the batch's visibility
    #: timeout ended, and SQS delivers the message again.
    lapsed_line: str = ''
    #: The task's ``on_permanent_failure`` runs once it is settled.
    permanent: bool = False
    #: DEAD_LETTER: the line when a dead run was queued in place of the copy,
    #: and when no copy was sent at all (no hook then: it runs again).
    dead_run_line: str = ''
    unsent_line: str = ''


_RAN = '%(where)s %(outcome)s in %(duration).3fs'
_LAPSED = 'visibility timeout ended'

#: Every outcome's row: the one table settling, the reporter, records,
#: metrics and tracing read (a new Outcome without a row fails at import).
OUTCOMES: dict[Outcome, OutcomeRow] = {
    Outcome.SUCCEEDED: OutcomeRow(
        Settle.DELETE, TaskStatus.SUCCEEDED, 'succeeded', 'delete', 'on_task_succeeded',
        logging.INFO, _RAN, task_done=True),
    Outcome.SKIPPED: OutcomeRow(
        Settle.DELETE, TaskStatus.SUCCEEDED, 'skipped', 'delete', 'on_task_succeeded',
        logging.INFO, _RAN, task_done=True),
    Outcome.CANCELLED: OutcomeRow(
        Settle.DELETE, TaskStatus.CANCELLED, 'cancelled', 'delete', 'on_task_cancelled',
        logging.INFO, '%(where)s cancelled: deleted without running', task_done=True),
    Outcome.RETRY: OutcomeRow(
        Settle.COPY, TaskStatus.SCHEDULED, 'retried', 'retry', 'on_task_retried',
        logging.WARNING, '%(where)s failed in %(duration).3fs, retrying in %(delay)ds: '
        '%(failure)s', run_failed=True, holds_group=True,
        lapsed_line='%(where)s failed in %(duration).3fs: %(failure)s; its retry was not sent '
                    'before its ' + _LAPSED + ', so SQS delivers it again'),
    Outcome.DEAD_LETTER: OutcomeRow(
        Settle.DEAD_LETTER, TaskStatus.FAILED, 'dead_lettered', 'dead_letter',
        'on_task_dead_lettered', logging.ERROR,
        '%(where)s failed permanently in %(duration).3fs, dead-lettered: %(failure)s',
        run_failed=True, permanent=True,
        dead_run_line='%(where)s failed permanently in %(duration).3fs, its dead run '
                      '%(dead_run)s queued: %(failure)s',
        unsent_line='%(where)s failed permanently in %(duration).3fs, but its dead-letter copy '
                    'was not sent; it will run again: %(failure)s'),
    Outcome.RELEASE: OutcomeRow(
        Settle.RELEASE, TaskStatus.QUEUED, 'released', 'release', 'on_task_released',
        logging.INFO, '%(where)s released: %(reason)s', holds_group=True,
        lapsed_line='%(where)s not run (%(reason)s): its ' + _LAPSED + ' first, so SQS '
                    'delivers it again'),
    # The task's record is left to the delivery that runs.
    Outcome.DUPLICATE: OutcomeRow(
        Settle.DELETE, TaskStatus.QUEUED, 'duplicate', 'delete', 'on_task_duplicate',
        logging.INFO, '%(where)s deleted without running: %(reason)s'),
    # Not run, and not a retry: its record stays scheduled, with its due time.
    # Every 15 minutes of a long wait: no INFO line.
    Outcome.WAITING: OutcomeRow(
        Settle.COPY, TaskStatus.SCHEDULED, 'waiting', 'wait', 'on_task_waiting',
        logging.DEBUG, '%(where)s arrived early, %(reason)s: sent on, delayed %(delay)d s',
        lapsed_line='%(where)s arrived early, %(reason)s: not sent on before its ' + _LAPSED
                    + ', SQS delivers it again'),
}
if set(OUTCOMES) != set(Outcome):
    raise AssertionError('an Outcome without its row: %s' % (set(Outcome) - set(OUTCOMES)))
for _outcome, _row in OUTCOMES.items():
    _outcome.row = _row
    for _name in ('settle', 'record_status', 'metric_label', 'settle_operation', 'hook_name',
                  'run_failed'):
        setattr(_outcome, _name, getattr(_row, _name))

#: Outcomes that leave a FIFO message in its group, holding back the rest.
HOLDS_GROUP = tuple(outcome for outcome, row in OUTCOMES.items() if row.holds_group)


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
    #: On a FIFO queue, a retry or release keeps the message invisible this
    #: many seconds instead of sending a copy (to the back of its group).
    hold_sec: Optional[int] = None
    #: What run_task returned (SUCCEEDED only), for hooks such as the records'.
    result: Any = None
    #: Its copy was not sent because the batch's visibility timeout had (nearly)
    #: ended: the message is left for SQS to deliver, once.
    lapsed: bool = False
    #: DEAD_LETTER of a task that handles its dead letters: the dead run sent in
    #: place of the dead-letter copy (None when the copy went instead).
    dead_run: Optional[Message] = None
    #: A retry waiting longer than SQS's 15-minute delay: that whole wait.
    wait_sec: Optional[int] = None

    @property
    def retry_delay_sec(self) -> int:
        """Seconds until a retry's next attempt: its copy's delay (its whole
        wait, for a long one) or, on a FIFO queue, how long its message is
        held invisible."""
        if self.copy is not None:
            return self.copy.delay_sec if self.wait_sec is None else self.wait_sec
        return self.hold_sec or 0

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
    """This process's id, ``vm:29984@2026-11-24T10:15:03Z`` (host, pid, when first
    asked for), and that time: it names the process in log lines, task records
    and worker rows, so the three join. A forked child gets its own."""
    global _identity
    pid = os.getpid()
    if _identity[0] != pid:
        started = time.time()
        # The host name is cut so the id fits the records' columns (160).
        _identity = (pid, '%s:%d@%s' % (socket.gethostname()[:120], pid, time.strftime(
            '%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))), started)
    return _identity[1], _identity[2]
