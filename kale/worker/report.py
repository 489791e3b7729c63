"""What a worker says about each settled message: one log line per outcome,
the matching hook, the task's own ``on_permanent_failure``, and counts.

Log lines carry ids, never arguments. A failed run's line carries the
exception's type, and its message only when :func:`kale.logs.exception_messages`
allows (decided once, when the worker starts). A message that failed
verification is named by its SQS message id: its attributes are unsigned, so
they are not reported as its task.
"""
from __future__ import annotations

import collections
import logging
from typing import Any

from kale import logs
from kale.events import OUTCOMES, Outcome, OutcomeRow, Settle, Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.queue_config import TaskQueue
from kale.retry import without_message
from kale.worker.batch import Batch
from kale.worker.waiting import NOTED, WaitingCopies

logger = logging.getLogger('kale.worker')


#: Each outcome's value, read without Enum's ``value`` descriptor (per task).
_VALUES = {outcome: outcome.value for outcome in Outcome}
#: The hook each outcome calls once settled (its row's ``hook_name``).
HOOKS = {outcome: getattr(WorkerHooks, row.hook_name) for outcome, row in OUTCOMES.items()}


class Reporter:
    """Logs and dispatches the outcome of every settled message, as its row of
    :data:`kale.events.OUTCOMES` says."""

    def __init__(self, hooks: HookDispatcher, exception_messages: bool = True):
        self.hooks = hooks
        #: Whether a failure's reason is logged whole, or without the exception's message.
        self._messages = exception_messages
        self.stats: collections.Counter[str] = collections.Counter()
        #: The outcomes whose hook someone overrides (asked once: a hook nobody
        #: overrides costs nothing per task).
        self._hooked = {outcome for outcome, hook in HOOKS.items() if hooks.overridden(hook)}
        #: Tasks sent on before their due time, not seen since (for a burst's end).
        self.waiting = WaitingCopies()

    def batch_settled(self, batch: Batch) -> None:
        for settlement in batch.settlements:
            self.settled(batch.queue, settlement)
        self.hooks(WorkerHooks.after_batch, batch.queue, batch)

    def settled(self, queue: TaskQueue, s: Settlement) -> None:
        outcome = s.outcome
        row = OUTCOMES[outcome]
        self.stats[_VALUES[outcome]] += 1
        if self.waiting.by_queue or self.waiting.retried or outcome in NOTED:
            self.waiting.settled(queue.name, s)
        line, hooked = row.line, outcome in self._hooked
        if s.lapsed or row.settle is Settle.DEAD_LETTER or s.dead_run is not None:
            line, hooked = _special_line(row, s, hooked)
        if logger.isEnabledFor(row.level):
            logger.log(row.level, line, self._fields(queue, s), extra=fields(queue, s))
        if hooked:
            self.hooks(HOOKS[outcome], s)
        if row.permanent:
            self._on_permanent_failure(queue, row, s)

    def _fields(self, queue: TaskQueue, s: Settlement) -> dict[str, Any]:
        """What a line of the table may name."""
        failure = s.reason if self._messages or not s.outcome.run_failed else \
            without_message(s.reason, s.exception)
        return {'where': 'task %s (%s) on %s' % (s.task_id, s.task_name, queue.name),
                'outcome': _VALUES[s.outcome], 'duration': s.duration_sec, 'reason': s.reason,
                'failure': failure, 'delay': s.retry_delay_sec,
                'dead_run': s.dead_run.task_id if s.dead_run is not None else ''}

    def summary(self) -> str:
        return ', '.join('%d %s' % (n, outcome) for outcome, n in sorted(self.stats.items()))

    @staticmethod
    def _on_permanent_failure(queue: TaskQueue, row: OutcomeRow, s: Settlement) -> None:
        """Run the task's ``on_permanent_failure``, once its message is settled
        (a dead letter's copy not sent runs again)."""
        if s.task is None or not (s.settled or row.settle is not Settle.DEAD_LETTER):
            return
        try:
            s.task.on_permanent_failure(s.exception, s.reason)
        except Exception:
            logger.exception('task %s (%s) on %s: on_permanent_failure hook failed',
                             s.task_id, s.task_name, queue.name)


def _special_line(row: OutcomeRow, s: Settlement, hooked: bool) -> tuple[str, bool]:
    """The line of a lapsed settlement, a dead letter or a dead run, and
    whether its hook runs (not for a dead-letter copy not sent)."""
    if s.lapsed and row.lapsed_line:
        return row.lapsed_line, hooked
    if row.settle is Settle.DEAD_LETTER and not s.settled:
        return row.unsent_line, False       # not settled: it runs again
    if s.dead_run is not None and row.dead_run_line:
        return row.dead_run_line, hooked
    return row.line, hooked


def fields(queue: TaskQueue, s: Settlement) -> dict:
    """The log fields of a settled message (an unverified one: its SQS id, no attempt)."""
    message = s.message
    return logs.task_fields(s.task_id, s.task_name, queue.name,
                            message.attempt if message is not None else None)
