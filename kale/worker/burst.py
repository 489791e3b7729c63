"""When a burst worker is done: nothing visible, in flight or delayed on its
queues that it should wait for (docs/explanation/internals-worker.md, "When a burst worker is done").
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Optional

from kale.queue_config import TaskQueue
from kale.transport import MAX_DELAY_SEC, QueueCounts

logger = logging.getLogger('kale.worker')

#: By queue name: how many tasks are due later than the burst waits, and
#: the earliest of those due times (epoch seconds); None: not known.
DueLater = Optional[Mapping[str, tuple[int, float]]]


class BurstEnd:
    """Decides, from its queues' counts, whether a burst worker is done."""

    def __init__(self, who: str, wall_clock: Callable[[], float] = time.time):
        self.who = who
        self.wall_clock = wall_clock
        self._told = False
        self._left_told = False

    def drained(self, counts: Mapping[TaskQueue, QueueCounts],
                sent_on: Optional[Callable[[str], int]] = None,
                due_later: DueLater = None,
                own_retries: Optional[Callable[[str], int]] = None) -> bool:
        """True when every queue is empty but for delayed messages the burst
        does not wait for (see the docs page): ``sent_on(queue name)`` copies this
        worker sent on, ``due_later`` (from the records) and, without records,
        all but ``own_retries(queue name)``, this worker's own retries not
        back yet. Logs once what it waits for, and once what it leaves."""
        if all(c.total == 0 for c in counts.values()):
            return True
        if any(c.visible or c.in_flight for c in counts.values()):
            self._told = False           # work to do: a later wait is told again
            return False
        sent, later, unknown = _delayed(counts, sent_on, due_later)
        # without records, only its own retries are known: the rest is left behind
        if not unknown or (due_later is None and not _any_own(counts, own_retries)):
            self._tell_left(counts, sent, later, unknown)
            return True
        if not self._told:
            self._told = True
            self._tell_waiting(counts)
        return False

    def _tell_waiting(self, counts: Mapping[TaskQueue, QueueCounts]) -> None:
        """Say what delayed messages the burst waits for, and until when at the latest."""
        delayed = ', '.join('%d on %s' % (c.delayed, queue.name)
                            for queue, c in counts.items() if c.delayed)
        latest = time.strftime('%H:%M:%S', time.localtime(self.wall_clock() + MAX_DELAY_SEC))
        logger.info('%s: burst: waiting for delayed messages (%s); SQS makes each visible '
                    'within %d minutes of its publish, so by %s at the latest',
                    self.who, delayed, MAX_DELAY_SEC // 60, latest)

    def _tell_left(self, counts: Mapping[TaskQueue, QueueCounts], sent: Mapping[TaskQueue, int],
                   later: Mapping[TaskQueue, tuple[int, float]],
                   unknown: Mapping[TaskQueue, int]) -> None:
        """Say, once, what delayed messages the burst leaves behind."""
        if self._left_told or not any(c.delayed for c in counts.values()):
            return
        self._left_told = True
        parts = [part for queue, c in counts.items() if c.delayed
                 for part in _left_on(queue, c.delayed, sent[queue], later[queue],
                                      unknown.get(queue, 0))]
        hint = ('; with RECORDS_URL set, a burst waits for those due within %d minutes and '
                'leaves only the later ones' % (MAX_DELAY_SEC // 60)) if unknown else ''
        logger.info('%s: burst: done, leaving delayed tasks behind: %s%s', self.who,
                    ', '.join(parts), hint)


def _delayed(counts: Mapping[TaskQueue, QueueCounts], sent_on: Optional[Callable[[str], int]],
             due_later: DueLater) -> tuple[dict[TaskQueue, int], dict[TaskQueue, tuple[int, float]],
                                           dict[TaskQueue, int]]:
    """By queue: the copies sent on, what the records say is due later, and
    how many delayed messages neither accounts for (only where some are)."""
    sent = {q: sent_on(q.name) if sent_on is not None else 0 for q in counts}
    later = {q: (due_later or {}).get(q.name, (0, 0.0)) for q in counts}
    unknown = {q: n for q, n in ((q, c.delayed - sent[q] - later[q][0])
                                 for q, c in counts.items()) if n > 0}
    return sent, later, unknown


def _any_own(counts: Mapping[TaskQueue, QueueCounts],
             own_retries: Optional[Callable[[str], int]]) -> bool:
    """Whether the worker's own delayed retries are not all back yet."""
    return own_retries is not None and any(own_retries(q.name) for q in counts)


def _left_on(queue: TaskQueue, delayed: int, sent: int, later: tuple[int, float],
             unknown: int) -> list[str]:
    """What the burst leaves on one queue's delayed messages, said in parts."""
    parts = []
    known = min(delayed, sent + later[0])
    if known:
        parts.append('%d on %s due later%s' % (known, queue.name, (
            ' (the next at %s)' % time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(later[1])))
            if later[0] else ''))
    if unknown:
        parts.append('%d on %s whose due time SQS does not say' % (unknown, queue.name))
    return parts
