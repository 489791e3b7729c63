"""When a burst worker is done: nothing visible, in flight or delayed on its queues.

A burst worker that finds only delayed messages (a ``delay_sec`` publish, a
scheduled retry) waits for them, saying once what it waits for and until
when at the latest: SQS delays a message at most 15 minutes and does not
say when each is due. It does not wait for the tasks it sent on because
they arrived before their due time (:mod:`kale.worker.waiting`): they may
wait for days.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Optional

from kale.queue_config import TaskQueue
from kale.transport import MAX_DELAY_SEC, QueueCounts

logger = logging.getLogger('kale.worker')


class BurstEnd:
    """Decides, from its queues' counts, whether a burst worker is done."""

    def __init__(self, who: str, wall_clock: Callable[[], float] = time.time):
        self.who = who
        self.wall_clock = wall_clock
        self._told = False

    def drained(self, counts: Mapping[TaskQueue, QueueCounts],
                waiting: Optional[Callable[[str], int]] = None) -> bool:
        """True when every queue is empty, but for the ``waiting(queue name)``
        delayed copies this worker sent on before their due time; logs once
        when only delayed messages are left."""
        if all(c.total == 0 for c in counts.values()):
            return True
        if waiting is not None and _only_sent_on_left(counts, waiting):
            return True
        if any(c.visible or c.in_flight for c in counts.values()):
            self._told = False           # work to do: a later wait is told again
            return False
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


def _only_sent_on_left(counts: Mapping[TaskQueue, QueueCounts],
                       waiting: Callable[[str], int]) -> bool:
    """Whether all that is left on the queues is the delayed copies this
    worker sent on (``waiting(queue name)`` of them on each)."""
    return all(not c.visible and not c.in_flight and c.delayed <= waiting(queue.name)
               for queue, c in counts.items())
