"""Getting batches: probes that keep what they find, short receives, the idle watch.

- :meth:`Receiver.probe` is how a queue selector asks whether a queue has
  work: a short-poll receive. Messages it finds are kept as that queue's
  first batch, so asking costs no request beyond the receive it replaces.
- :meth:`Receiver.receive` is a short-poll receive for the next batch of a busy
  queue.
- :meth:`Receiver.watch` is what an idle worker does: one long poll per
  queue, all at once, each waiting up to its queue's
  ``long_poll_time_sec`` and polled again as soon as it answers empty.
  Whichever queue gets a message first answers at once, and each queue costs
  what its own long poll implies: three empty queues at 20 s cost 9 requests
  a minute, a queue at 1 s 60.

Every batch carries its own receive time, so one that waits its turn (a
second queue answering during a watch) is still held to its own budget.
While a task runs, the worker tells the receiver until when it may be busy
(:meth:`busy_until`: the run's start plus its ``time_limit``); a batch whose
budget would be over by then (a poll still out when the watch returned, a
batch read ahead) could run nothing, so it is given back at once rather than
held until SQS delivers it again. Batches received but never run are
released by :meth:`release_ready` and :meth:`close`.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import queue
import threading
from typing import Callable, Collection, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import SQSError
from kale.queue_config import TaskQueue
from kale.queue_selector import tickets
from kale.worker.answers import ReceivesOut, wait_for_answers
from kale.worker.batch import SETTLE_MARGIN_SEC, Batch
from kale.worker.consumer import Consumer
from kale.worker.prefetch import Prefetch

logger = logging.getLogger(__name__)

#: How often a waiting watch wakes to see whether the worker is stopping.
WATCH_TICK_SEC = 0.1

#: Longest a serving worker's watch waits before it returns to the loop (its
#: polls carry on meanwhile), so the worker still looks after itself.
WATCH_RETURN_SEC = 1.0

#: Shortest time between the starts of two polls of one queue, so that a
#: queue with long_poll_time_sec 0 is not polled in a busy loop.
MIN_POLL_INTERVAL_SEC = 0.25

#: A busy queue's next batches are received ahead, while the current one
#: runs, once a receive takes this long: on a remote endpoint the worker then
#: waits about one round trip per batch. On a fast one (a local emulator, the
#: memory transport) the thread would cost more than it saves.
READ_AHEAD_ABOVE_SEC = 0.005
#: How many batches are received ahead.
READ_AHEAD_BATCHES = 2


class Receiver:
    """Receives batches for one worker (main-thread API; polls run on threads)."""

    def __init__(self, consumer: Consumer, queues: Sequence[TaskQueue],
                 stopping: Callable[[], bool] = lambda: False,
                 read_ahead_above_sec: Optional[float] = READ_AHEAD_ABOVE_SEC,
                 prefetch: Optional[Prefetch] = None, clock: Clock = SYSTEM_CLOCK,
                 settling_behind: Callable[[], bool] = lambda: False):
        self.consumer = consumer
        self.clock = clock
        self.queues = list(queues)
        self.stopping = stopping
        #: Whether the worker's settling is behind: nothing is received ahead then.
        self.settling_behind = settling_behind
        #: How many messages each receive asks for.
        self.prefetch = prefetch or Prefetch()
        self._prefetched: dict[str, Batch] = {}
        self._known_empty: set[str] = set()
        self._ready: list[Batch] = []
        self._results: 'queue.Queue[tuple[TaskQueue, Optional[Batch], Optional[SQSError]]]' = \
            queue.Queue()
        self._polling: set[str] = set()
        self._poll_started: dict[str, float] = {}
        #: When a queue that answered empty may be polled again.
        self._next_poll: dict[str, float] = {}
        self._closed = False
        self._close_lock = threading.Lock()
        #: The idle watch's polls out (waited for when the worker stops).
        self.out = ReceivesOut()
        #: Receive the next batches of a busy queue while the current one runs,
        #: once a receive takes this long (None: never).
        self.read_ahead_above_sec: Optional[float] = read_ahead_above_sec
        self._ahead: dict[str, collections.deque[concurrent.futures.Future[Batch]]] = {}
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        #: Until when the running task may keep the worker busy (monotonic; 0: idle).
        self._busy_until = 0.0
        #: While a message runs alone (a suspect, a long task), what a poll
        #: still out brings is given back at once, in the poll's thread: a
        #: suspect that kills its worker would take it along, unseen.
        self.alone = False

    # --- selection ---------------------------------------------------------

    def new_selection(self) -> None:
        """Forget which queues the last selection found empty."""
        self._known_empty.clear()

    def probe(self, queue: TaskQueue) -> bool:
        """Whether the queue has visible messages; any found become its next batch."""
        if queue.name in self._prefetched:
            return True
        batch = self._receive(queue, 0)
        if batch.messages:
            self._prefetched[queue.name] = batch
            return True
        self._known_empty.add(queue.name)
        return False

    def known_empty(self, queue: TaskQueue) -> bool:
        return queue.name in self._known_empty

    def take(self, queue: TaskQueue) -> Optional[Batch]:
        """The batch a probe kept for ``queue``; batches kept for other queues
        are queued to run next rather than wasted."""
        batch = self._prefetched.pop(queue.name, None)
        self._ready.extend(self._prefetched.values())
        self._prefetched.clear()
        return batch

    # --- receiving -------------------------------------------------------------

    def receive(self, queue: TaskQueue) -> Batch:
        """The next batch of a queue that just had work (short poll). When
        reading ahead and this batch is full, the receive of the one after it
        starts at once, on a thread, to arrive while this one runs."""
        ahead = self._ahead.get(queue.name)
        if ahead:
            batch = ahead.popleft().result()
        else:
            batch = self._receive(queue, 0)
        if self.read_ahead and batch.messages and len(batch.messages) >= batch.asked \
                and self.prefetch.may_read_ahead(queue, READ_AHEAD_BATCHES) \
                and not self.stopping() and not self.settling_behind():
            ahead = self._ahead.setdefault(queue.name, collections.deque())
            while len(ahead) < READ_AHEAD_BATCHES:
                ahead.append(self._reader().submit(self._receive_ahead, queue))
        return batch

    def _receive_ahead(self, queue: TaskQueue) -> Batch:
        """A batch received ahead on a thread; given back at once (leaving an
        empty batch in its place) when it arrives too late to run."""
        batch = self._receive(queue, 0)
        if batch.messages and self._doomed(batch):
            self._release(batch)
            return Batch(queue, [], batch.received_at, batch.sqs_name)
        return batch

    # --- while a task runs ------------------------------------------------------

    def busy_until(self, until: float) -> None:
        """The running task may keep the worker busy until ``until`` (its
        start plus its time limit, on the consumer's clock; 0 once it ended).
        Batches waiting to run whose budget is over by then are given back at
        once, as are those that arrive meanwhile."""
        self._busy_until = until
        if not until:
            return
        if self._polling:               # results arrive only from polls still out
            self._collect()
        if not self._ready:
            return
        doomed = [batch for batch in self._ready if self._doomed(batch)]
        for batch in doomed:
            self._ready.remove(batch)
            self._release(batch)

    def _doomed(self, batch: Batch) -> bool:
        """Whether the batch's budget ends (nearly) before the running task
        may end: nothing of it could start in time."""
        busy = self._busy_until
        return bool(busy) and batch.deadline < busy + SETTLE_MARGIN_SEC

    def _receive(self, queue: TaskQueue, wait_sec: int) -> Batch:
        """One receive, asking for as many messages as the worker will start soon."""
        asked, blind = self.prefetch.count(queue), self.prefetch.blind(queue)
        batch = self.consumer.receive(queue, wait_sec=wait_sec, max_messages=asked)
        batch.asked, batch.blind = asked, blind
        return batch

    @property
    def read_ahead(self) -> bool:
        """Whether to receive ahead: only where a receive takes long enough
        (a remote endpoint) for the wait to matter more than the thread."""
        if self.read_ahead_above_sec is None:
            return False
        return self.consumer.recent_receive_sec >= self.read_ahead_above_sec

    def done_with(self, queue: TaskQueue) -> None:
        """The worker turns to another queue: a batch read ahead for this one
        joins the batches that run next (or is released if the worker stops)."""
        for ahead in self._ahead.pop(queue.name, ()):
            ahead.add_done_callback(lambda done: self._report_ahead(queue, done))

    def _report_ahead(self, queue_: TaskQueue, done: 'concurrent.futures.Future[Batch]') -> None:
        error = done.exception()
        if error is not None:
            self._results.put((queue_, None, error if isinstance(error, SQSError)
                               else SQSError(str(error))))
            return
        self._deliver(queue_, done.result())

    def _reader(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                READ_AHEAD_BATCHES, thread_name_prefix='kale-read-ahead')
        return self._executor

    def has_ready(self) -> bool:
        self._collect()
        return bool(self._ready)

    def next_ready(self) -> Optional[Batch]:
        """The highest-priority batch received but not yet run (the others stay
        here, where :meth:`release_ready` can give them back)."""
        self._collect()
        if not self._ready:
            return None
        batch = max(self._ready, key=lambda b: tickets(b.queue))
        self._ready.remove(batch)
        return batch

    # --- the idle watch -----------------------------------------------------------

    def watch(self, each_once: bool = False, max_wait_sec: float = WATCH_RETURN_SEC) -> bool:
        """Long-poll every queue at once, each polled again as soon as its own
        poll answers empty, until one has messages (True: take them with
        :meth:`next_ready`). False when the worker is stopping, after
        ``max_wait_sec`` (so the worker can look after itself; polls still out
        carry on), or, with ``each_once`` (a burst, which then checks whether
        it is done), once every queue has answered empty.

        A queue that answered empty is polled again no sooner than
        MIN_POLL_INTERVAL_SEC after that poll started, so a queue with
        ``long_poll_time_sec: 0`` is not polled in a busy loop; one that
        brought messages is polled again at once. Raises the first SQS error a poll met (the
        caller backs off).
        """
        answered: set[str] = set()
        deadline = self.clock.monotonic() + max_wait_sec
        while not self.stopping():
            self._start_due_polls(answered if each_once else ())
            result = self._next_result()
            if result is not None:
                queue_, got_messages = self._take_result(result, raise_errors=True)
                if got_messages:
                    return True
                answered.add(queue_.name)
                if each_once and answered >= {q.name for q in self.queues}:
                    return False
            if not each_once and self.clock.monotonic() >= deadline:
                return False
        return False

    def _start_due_polls(self, skipped: Collection[str]) -> None:
        """Poll each queue whose poll is due, but for those polling still and
        those ``skipped`` (by name)."""
        now = self.clock.monotonic()
        for queue_ in self.queues:
            if queue_.name in self._polling or queue_.name in skipped:
                continue
            if now >= self._next_poll.get(queue_.name, 0.0):
                self._start_poll(queue_)

    def _next_result(self) -> Optional[tuple[TaskQueue, Optional[Batch], Optional[SQSError]]]:
        """The next finished poll, waiting WATCH_TICK_SEC at most for one."""
        try:
            return self._results.get(timeout=WATCH_TICK_SEC)
        except queue.Empty:
            return None

    def _take_result(self, result: tuple[TaskQueue, Optional[Batch], Optional[SQSError]],
                     raise_errors: bool) -> tuple[TaskQueue, bool]:
        """Record one finished poll; whether it brought messages."""
        queue_, batch, error = result
        self._polling.discard(queue_.name)
        if error is not None:
            if raise_errors:
                raise error
            logger.warning('long poll on queue %s failed: %s', queue_.name, error)
            return queue_, False
        if batch is not None and batch.messages:
            self._next_poll.pop(queue_.name, None)        # it has work: poll again at once
            self._ready.append(batch)
            return queue_, True
        self._next_poll[queue_.name] = (self._poll_started.get(queue_.name, 0.0)
                                        + MIN_POLL_INTERVAL_SEC)
        return queue_, False

    def _start_poll(self, queue_: TaskQueue) -> None:
        self._polling.add(queue_.name)
        self._poll_started[queue_.name] = self.clock.monotonic()
        key = self.out.sent(queue_.long_poll_time_sec)
        threading.Thread(target=self._poll, args=(queue_, key), daemon=True,
                         name='kale-poll-%s' % queue_.name).start()

    def _poll(self, queue_: TaskQueue, key: int) -> None:
        try:
            batch = self._receive(queue_, queue_.long_poll_time_sec)
        except SQSError as exc:
            self._results.put((queue_, None, exc))
        except Exception as exc:   # a poll thread must always report back
            logger.exception('long poll on queue %s failed', queue_.name)
            self._results.put((queue_, None, SQSError(str(exc))))
        else:
            self._deliver(queue_, batch)
        finally:
            self.out.answered(key)

    def _deliver(self, queue_: TaskQueue, batch: Batch) -> None:
        """Hand a batch received on a thread to the worker, or back to SQS if
        the worker has gone."""
        if batch.messages and (self.alone or self._doomed(batch)):
            logger.debug('a batch of %d from queue %s arrived while a task runs %s: given back '
                         'at once', len(batch.messages), queue_.name,
                         'alone' if self.alone else 'that may outlast its budget')
            self._release(batch)
            batch = Batch(queue_, [], batch.received_at, batch.sqs_name)
        with self._close_lock:
            if not self._closed:
                self._results.put((queue_, batch, None))
                return
        if batch.messages:
            self._release(batch)

    def _collect(self) -> None:
        """Move batches from polls that finished since the last look."""
        while True:
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                return
            self._take_result(result, raise_errors=False)

    # --- closing --------------------------------------------------------------------

    def _release(self, batch: Batch) -> None:
        try:
            self.consumer.settle(batch)         # no settlements: every message is released
        except Exception:
            logger.exception('could not release a batch of queue %s', batch.queue.name)

    def release_ready(self) -> None:
        """Give back every batch received but not yet run (waiting for those
        being read ahead)."""
        for name, futures in list(self._ahead.items()):
            del self._ahead[name]
            for ahead in futures:
                try:
                    self._ready.append(ahead.result())
                except SQSError as exc:
                    logger.warning('reading ahead on queue %s failed: %s', name, exc)
        self._collect()
        ready, self._ready = self._ready, []
        for batch in ready:
            self._release(batch)

    def close(self) -> None:
        """Release every batch received but not run, and what the polls still
        out bring: they are waited for (see :mod:`kale.worker.answers`)."""
        for name in list(self._ahead):
            self.done_with(next(q for q in self.queues if q.name == name))
        if self._executor is not None:
            self._executor.shutdown(wait=True)      # a short poll: it ends soon
        with self._close_lock:
            self._closed = True
        wait_for_answers(self.out)
        self._collect()
        leftovers = self._ready + list(self._prefetched.values())
        self._ready, self._prefetched = [], {}
        for batch in leftovers:
            self._release(batch)
