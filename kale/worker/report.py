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

from kale import logs
from kale.events import Outcome, Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.queue_config import TaskQueue
from kale.reasons import without_message
from kale.worker.batch import Batch
from kale.worker.waiting import WaitingCopies

logger = logging.getLogger('kale.worker')


#: Each outcome's name, read without Enum's ``value`` descriptor.
_NAMES = {outcome: outcome.value for outcome in Outcome}
#: The hook each outcome calls once settled (see ``Outcome.hook_name``).
HOOKS = {outcome: getattr(WorkerHooks, outcome.hook_name) for outcome in Outcome}


class Reporter:
    """Logs and dispatches the outcome of every settled message."""

    def __init__(self, hooks: HookDispatcher, exception_messages: bool = True):
        self.hooks = hooks
        #: Whether a failure's reason is logged whole, or without the exception's message.
        self._messages = exception_messages
        self.stats: collections.Counter[str] = collections.Counter()
        self._on_succeeded = hooks.overridden(WorkerHooks.on_task_succeeded)
        #: Tasks sent on before their due time, not seen since (for a burst's end).
        self.waiting = WaitingCopies()

    def batch_settled(self, batch: Batch) -> None:
        for settlement in batch.settlements:
            self.settled(batch.queue, settlement)
        self.hooks(WorkerHooks.after_batch, batch.queue, batch)

    def settled(self, queue: TaskQueue, s: Settlement) -> None:
        self.stats[_NAMES[s.outcome]] += 1
        if self.waiting.by_queue or s.outcome is Outcome.WAITING:
            self.waiting.settled(queue.name, s)
        if s.outcome is Outcome.SUCCEEDED or s.outcome is Outcome.SKIPPED:
            if logger.isEnabledFor(logging.INFO):
                logger.info('task %s (%s) on %s %s in %.3fs', s.task_id, s.task_name, queue.name,
                            s.outcome.value, s.duration_sec, extra=fields(queue, s))
            if self._on_succeeded:
                self.hooks(HOOKS[s.outcome], s)
            return
        where = 'task %s (%s) on %s' % (s.task_id, s.task_name, queue.name)
        extra = fields(queue, s)
        failure = s.reason if self._messages or not s.outcome.run_failed else \
            without_message(s.reason, s.exception)
        if s.outcome is Outcome.CANCELLED:
            logger.info('%s cancelled: deleted without running', where, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        elif s.outcome is Outcome.DUPLICATE:
            logger.info('%s deleted without running: %s', where, s.reason, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        elif s.outcome is Outcome.WAITING:      # every 15 minutes of a long wait: no INFO line
            logger.debug('%s arrived early, %s: %s', where, s.reason, 'not sent on before its '
                         'visibility timeout ended, SQS delivers it again' if s.lapsed else
                         'sent on, delayed %d s' % s.retry_delay_sec, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        elif s.outcome is Outcome.RETRY and s.lapsed:
            logger.warning('%s failed in %.3fs: %s; its retry was not sent before its visibility '
                           'timeout ended, so SQS delivers it again', where, s.duration_sec,
                           failure, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        elif s.outcome is Outcome.RETRY:
            logger.warning('%s failed in %.3fs, retrying in %ds: %s', where, s.duration_sec,
                           s.retry_delay_sec, failure, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        elif s.outcome is Outcome.DEAD_LETTER and not s.settled:
            logger.error('%s failed permanently in %.3fs, but its dead-letter copy was not sent; '
                         'it will run again: %s', where, s.duration_sec, failure, extra=extra)
        elif s.outcome is Outcome.DEAD_LETTER and s.dead_run is not None:
            logger.error('%s failed permanently in %.3fs, its dead run %s queued: %s', where,
                         s.duration_sec, s.dead_run.task_id, failure, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
            self._on_permanent_failure(where, s)
        elif s.outcome is Outcome.DEAD_LETTER:
            logger.error('%s failed permanently in %.3fs, dead-lettered: %s', where,
                         s.duration_sec, failure, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
            self._on_permanent_failure(where, s)
        elif s.lapsed:
            logger.info('%s not run (%s): its visibility timeout ended first, so SQS delivers '
                        'it again', where, s.reason, extra=extra)
            self.hooks(HOOKS[s.outcome], s)
        else:
            logger.info('%s released: %s', where, s.reason, extra=extra)
            self.hooks(HOOKS[s.outcome], s)

    def summary(self) -> str:
        return ', '.join('%d %s' % (n, outcome) for outcome, n in sorted(self.stats.items()))

    @staticmethod
    def _on_permanent_failure(where: str, s: Settlement) -> None:
        if s.task is None:
            return
        try:
            s.task.on_permanent_failure(s.exception, s.reason)
        except Exception:
            logger.exception('%s: on_permanent_failure hook failed', where)


def fields(queue: TaskQueue, s: Settlement) -> dict:
    """The log fields of a settled message (an unverified one: its SQS id, no attempt)."""
    message = s.message
    return logs.task_fields(s.task_id, s.task_name, queue.name,
                            message.attempt if message is not None else None)
