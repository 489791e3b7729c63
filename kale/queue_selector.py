"""Queue selection: which queue a worker receives from next, and how many
emptiness checks each selector makes; subclass :class:`SelectQueueBase` and
name it in ``QUEUE_SELECTOR`` for your own (docs/explanation/internals-top.md,
"Queue selection")."""
from __future__ import annotations

import numbers
import random
from typing import Callable, Optional, Sequence

from kale.queue_config import TaskQueue


class QueueInfo:
    """The queues a worker serves, and a cached, counted emptiness check."""

    def __init__(self, queues: Sequence[TaskQueue], has_messages: Callable[[TaskQueue], bool]):
        if not queues:
            raise ValueError('a worker needs at least one queue')
        self._queues = list(queues)
        self._has_messages = has_messages
        self._known: dict[str, bool] = {}
        self.checks = 0

    def get_queues(self) -> list[TaskQueue]:
        """A fresh list of the queues (callers may change it)."""
        return list(self._queues)

    def new_selection(self) -> None:
        """Forget what the last selection learned about queues."""
        self._known.clear()

    def does_queue_need_work(self, queue: TaskQueue) -> bool:
        """Whether the queue has visible messages (asked once per selection)."""
        if queue.name not in self._known:
            self.checks += 1
            self._known[queue.name] = bool(self._has_messages(queue))
        return self._known[queue.name]

    def is_queue_empty(self, queue: TaskQueue) -> bool:
        """The original Kale's name for ``not does_queue_need_work(queue)``."""
        return not self.does_queue_need_work(queue)

    def get_highest_priority_queue_that_needs_work(self) -> Optional[TaskQueue]:
        for queue in sorted(self._queues, key=lambda q: tickets(q), reverse=True):
            if self.does_queue_need_work(queue):
                return queue
        return None


def tickets(queue: TaskQueue) -> int:
    """Lottery tickets of a queue: its priority, kept within 1..100."""
    priority = getattr(queue, 'priority', 1)
    if isinstance(priority, bool) or not isinstance(priority, numbers.Real) or priority != priority:
        return 1
    return int(min(max(float(priority), 1), 100))


def draw(queues: Sequence[TaskQueue], rng: random.Random) -> TaskQueue:
    """One lottery draw weighted by priority. ``queues`` must not be empty."""
    weights = [tickets(queue) for queue in queues]
    return rng.choices(list(queues), weights=weights, k=1)[0]


class SelectQueueBase:
    """Base of every selector: implement :meth:`get_queue`."""

    def __init__(self, queue_info: QueueInfo, rng: Optional[random.Random] = None):
        self.queue_info = queue_info
        self.rng = rng or random.Random()

    def select(self) -> TaskQueue:
        """One selection (what the worker calls)."""
        self.queue_info.new_selection()
        return self.get_queue()

    def get_queue(self) -> TaskQueue:
        raise NotImplementedError


class Random(SelectQueueBase):
    """Any queue with equal chance, priority ignored. 0 requests."""

    def get_queue(self) -> TaskQueue:
        return self.rng.choice(self.queue_info.get_queues())


class Lottery(SelectQueueBase):
    """A draw weighted by priority, emptiness ignored. 0 requests."""

    def get_queue(self) -> TaskQueue:
        return draw(self.queue_info.get_queues(), self.rng)


class HighestPriorityFirst(SelectQueueBase):
    """The highest-priority queue with messages; when all are empty, the
    highest-priority queue. 1 to N requests. Starves low priorities while
    higher ones have work."""

    def get_queue(self) -> TaskQueue:
        found = self.queue_info.get_highest_priority_queue_that_needs_work()
        if found is not None:
            return found
        return max(self.queue_info.get_queues(), key=tickets)


class HighestPriorityLottery(SelectQueueBase):
    """The highest-priority queue with messages; when all are empty, a draw
    among all. 1 to N requests."""

    def get_queue(self) -> TaskQueue:
        found = self.queue_info.get_highest_priority_queue_that_needs_work()
        if found is not None:
            return found
        return draw(self.queue_info.get_queues(), self.rng)


class LotteryLottery(SelectQueueBase):
    """Up to ``attempts`` draws among all queues, taking the first winner with
    messages; otherwise a final draw. 0 to N requests (a queue already found
    empty in this selection is not asked again)."""

    attempts = 10

    def get_queue(self) -> TaskQueue:
        queues = self.queue_info.get_queues()
        for _ in range(self.attempts):
            winner = draw(queues, self.rng)
            if self.queue_info.does_queue_need_work(winner):
                return winner
        return draw(queues, self.rng)


class ReducedLottery(SelectQueueBase):
    """The default. Draw among the remaining candidates; a winner with
    messages is taken, an empty one leaves the pool; when the pool is empty,
    draw among all (the worker then long-polls the winner). Higher priorities
    win more often, lower ones are never starved, and empty queues are rarely
    polled. 1 to N requests."""

    def get_queue(self) -> TaskQueue:
        candidates = self.queue_info.get_queues()
        while candidates:
            winner = draw(candidates, self.rng)
            if self.queue_info.does_queue_need_work(winner):
                return winner
            candidates.remove(winner)
        return draw(self.queue_info.get_queues(), self.rng)
