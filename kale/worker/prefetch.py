"""How many messages a receive asks for: no more than the worker will start
soon (the serial pool's :class:`Prefetch`), and the messages a pool holds
ready beyond its free places (:class:`Reserve`); see
docs/explanation/internals-worker.md, "How much a receive asks for".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from kale.clock import Clock
from kale.queue_config import AUTO_PREFETCH, TaskQueue

if TYPE_CHECKING:
    from kale.worker.batch import Batch

#: A worker receives what it expects to start within this many seconds.
PREFETCH_WINDOW_SEC = 1.0

#: Weight of the newest run time in a queue's running mean.
NEWEST_RUN_WEIGHT = 0.3

#: Receives' worth of time the messages a pool holds ready beyond its free
#: places last.
READ_AHEAD_RECEIVES = 2
#: Tasks that run this long on average get no messages held ready: a place
#: freed after such a task loses a round trip in hundreds, while a message
#: held ready may wait a whole run (when the tasks started together) and then
#: no longer fit its visibility timeout, which releases it.
READ_AHEAD_MAX_RUN_SEC = 1.0
#: The shortest time a receive is reckoned to take for that: a message asked
#: for reaches its place through the worker's loop and the pool's threads
#: too, which take a few milliseconds whatever the endpoint (on the memory
#: transport, 200 in flight stayed 15-25 places short with the receive's
#: own 0.1 ms).
READ_AHEAD_MIN_RECEIVE_SEC = 0.01


def read_ahead(max_in_flight: int, receive_sec: float, mean_run_sec: float) -> int:
    """Messages a pool holds ready beyond its free places (see :class:`Reserve`)."""
    lookahead = READ_AHEAD_RECEIVES * max(receive_sec, READ_AHEAD_MIN_RECEIVE_SEC)
    return min(max_in_flight, -int(-max_in_flight * lookahead // mean_run_sec))


class Reserve:
    """The messages a pool holds ready beyond its free places: as many as
    its running tasks end (by their mean run time) during two receives, so a
    place that frees does not wait a round trip for its next message. At
    most ``max_in_flight``; none before a task has run, nor while the tasks
    run for READ_AHEAD_MAX_RUN_SEC or more on average. Worked out again at
    most every ``every_sec``."""

    def __init__(self, max_in_flight: int, receive_sec: Callable[[], float], clock: Clock,
                 every_sec: float):
        self.max_in_flight = max_in_flight
        self.receive_sec = receive_sec
        self.clock = clock
        self.every_sec = every_sec
        #: The recent mean run time of the tasks that ran (0.0: none yet).
        self.mean_run_sec = 0.0
        self._until, self._count = 0.0, 0

    def ran(self, seconds: float) -> None:
        """A task ran for ``seconds``."""
        mean = self.mean_run_sec
        self.mean_run_sec = seconds if not mean else mean + NEWEST_RUN_WEIGHT * (seconds - mean)

    def count(self) -> int:
        """How many messages to hold ready now."""
        mean = self.mean_run_sec
        if not mean or mean >= READ_AHEAD_MAX_RUN_SEC:
            return 0
        now = self.clock.monotonic()
        if now >= self._until:
            self._until = now + self.every_sec
            self._count = read_ahead(self.max_in_flight, self.receive_sec(), mean)
        return self._count


class Prefetch:
    """Per-queue receive sizes for one worker (used from its main thread,
    read by its receiving threads)."""

    def __init__(self, window_sec: float = PREFETCH_WINDOW_SEC):
        self.window_sec = window_sec
        self._mean_run_sec: dict[str, float] = {}
        #: Receives left that take one message at a time (a queue of long tasks).
        self._one_at_a_time: dict[str, int] = {}

    def count(self, queue: TaskQueue) -> int:
        """How many messages the next receive from ``queue`` asks for."""
        if queue.prefetch != AUTO_PREFETCH:
            return min(int(queue.prefetch), queue.batch_size)
        if self._one_at_a_time.get(queue.name):
            return 1
        mean = self._mean_run_sec.get(queue.name)
        if mean is None:
            return queue.batch_size         # blind (see blind())
        if mean * queue.batch_size <= self.window_sec:
            return queue.batch_size
        return max(1, int(self.window_sec / mean))

    def blind(self, queue: TaskQueue) -> bool:
        """Whether a receive from ``queue`` now takes a whole batch without knowing
        its tasks' run times (what has not started within the window goes back)."""
        return queue.prefetch == AUTO_PREFETCH and queue.name not in self._mean_run_sec \
            and not self._one_at_a_time.get(queue.name)

    def may_read_ahead(self, queue: TaskQueue, batches: int) -> bool:
        """Whether ``batches`` more full batches, on top of the one that runs,
        would still all start within the window."""
        mean = self._mean_run_sec.get(queue.name)
        if mean is None or self._one_at_a_time.get(queue.name):
            return False
        return mean * self.count(queue) * (batches + 1) <= self.window_sec

    def mean_run_sec(self, queue: TaskQueue) -> Optional[float]:
        """The queue's recent mean run time (None before any run)."""
        return self._mean_run_sec.get(queue.name)

    # --- what the worker saw --------------------------------------------------

    def ran(self, queue: TaskQueue, seconds: float) -> None:
        """A task of ``queue`` ran for ``seconds``."""
        mean = self._mean_run_sec.get(queue.name)
        self._mean_run_sec[queue.name] = seconds if mean is None \
            else mean + NEWEST_RUN_WEIGHT * (seconds - mean)

    def received(self, queue: TaskQueue, long_tasks: int) -> None:
        """A batch of ``queue`` held ``long_tasks`` tasks that must run alone."""
        if long_tasks:
            self._one_at_a_time[queue.name] = queue.batch_size
        elif self._one_at_a_time.get(queue.name):
            self._one_at_a_time[queue.name] -= 1


def long_tasks(batch: 'Batch') -> int:
    """How many of the batch's tasks may outlast its budget (see Prefetch.received)."""
    longs = [cls for cls in batch.task_classes if batch.is_long(cls.time_limit)]
    if not longs:
        return 0
    return sum(1 for opened in batch.opened.values() if opened.task_class in longs)
