"""Receiving for a worker: receives kept in flight while its pool has room,
each a queue selection, and every queue long-polled at once while idle
(docs/explanation/internals-worker.md, "Receiving").
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
from typing import Callable, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import SQSError
from kale.queue_config import AUTO_PREFETCH, TaskQueue
from kale.queue_selector import QueueInfo, SelectQueueBase
from kale.worker.answers import ReceivesOut, wait_for_answers
from kale.worker.batch import SETTLE_MARGIN_SEC, Batch
from kale.worker.consumer import Consumer
from kale.worker.prefetch import Prefetch
from kale.worker.threads import Threads

logger = logging.getLogger(__name__)

#: Messages one receive may bring (SQS's limit).
MAX_ASK = 10
#: Shortest time between the starts of two polls of one queue, so that a
#: queue with long_poll_time_sec 0 is not polled in a busy loop.
MIN_POLL_INTERVAL_SEC = 0.25
#: The serial pool reads ahead once a receive takes this long (see the
#: docs page); on a local emulator or the memory transport the
#: thread would cost more than it saves.
READ_AHEAD_ABOVE_SEC = 0.005
#: How many batches the serial pool reads ahead.
READ_AHEAD_BATCHES = 2
#: The longest idle poll of a burst worker: it only asks whether the queues
#: are empty, and a poll still out when it exits is waited for (see
#: :mod:`kale.worker.answers`), so a 20-second poll would hold its exit.
BURST_POLL_SEC = 1


@dataclasses.dataclass(eq=False)
class Arrival:
    """What one receive brought back: a batch, an empty selection, or an error."""

    asked: int
    batch: Optional[Batch] = None
    empty: Optional[TaskQueue] = None   # the selection found every queue empty
    error: Optional[SQSError] = None
    polled: Optional[TaskQueue] = None  # a long poll of this queue (while idle)
    polled_at: float = 0.0              # when that poll began (monotonic)


class _Selecting(threading.local):
    """A receiving thread's own selector, its probes' findings and its ask,
    and the queue it keeps receiving from while that brings full batches."""

    selector: Optional[SelectQueueBase] = None
    found: dict[str, Batch]
    empty: set[str]
    ask = 1
    current: Optional[TaskQueue] = None
    left = 0


class Intake:
    """Main-thread API but for the receiving threads (see the docs page)."""

    def __init__(self, consumer: Consumer, queues: Sequence[TaskQueue],
                 selector_class: type[SelectQueueBase], deliver: Callable[[Arrival], None],
                 max_receives: int, clock: Clock = SYSTEM_CLOCK, inline: bool = False,
                 prefetch: Optional[Prefetch] = None, burst: bool = False):
        self.consumer = consumer
        #: A burst worker's idle polls wait at most BURST_POLL_SEC.
        self.burst = burst
        #: Receive on the caller's thread (the serial pool), not on threads of its
        #: own, unless reading ahead (set by the worker, see the docs page).
        self.inline = inline
        self.read_ahead = False
        #: How much a receive asks of each queue (the serial pool): see kale.worker.prefetch.
        self.prefetch = prefetch
        self.queues = list(queues)
        self.selector_class = selector_class
        self.deliver = deliver
        self.max_receives = max_receives
        self.clock = clock
        self.idle = False
        #: Messages asked for by receives still out.
        self.asked = 0
        self._receives = 0
        self._polling: set[str] = set()
        #: When a queue that answered empty may be polled again: (its clock's
        #: time, or once the worker has waited this long in vain in all).
        self._next_poll: dict[str, tuple[float, float]] = {}
        #: Seconds the worker waited for events in vain (see :meth:`waited`).
        self._waited = 0.0
        self._paused_until = 0.0
        self._closed = False
        self._close_lock = threading.Lock()
        self._local = _Selecting()
        self._threads = Threads(max_receives, name='kale-receive')
        #: The receives and polls out (waited for when the worker stops).
        self.out = ReceivesOut()
        #: The worker holds all a suspect allows (see kale.worker.caps): what
        #: a receive still out brings is given back at once, in its thread,
        #: rather than held beside the suspect unseen.
        self.full = False
        #: (The serial pool.) Until when the task running may keep the worker
        #: busy, on the consumer's clock; 0 while none runs. See the docs page.
        self.busy_until = 0.0

    # --- the worker's side --------------------------------------------------------

    def refill(self, room: int) -> None:
        """Start receives for ``room`` more messages, less those asked for."""
        if self._closed or self.clock.monotonic() < self._paused_until:
            return
        room -= self.asked
        if self.idle:
            self._watch(room)
            return
        while room > 0 and self._receives < self.max_receives:
            if room < MAX_ASK and self._receives:
                return          # the receive out brings messages first: ask in tens
            ask = min(room, MAX_ASK)
            self._receives += 1
            self.asked += ask
            answer = (self.out.sent(0), Arrival(ask), 'receiving', self._select, ask)
            if self.inline and not self.read_ahead:
                self._answer(*answer)
            else:
                self._threads.submit(functools.partial(self._answer, *answer))
            room -= ask

    def reads_ahead(self) -> bool:
        """Whether receives take long enough to read ahead (the serial pool)."""
        return self.consumer.recent_receive_sec >= READ_AHEAD_ABOVE_SEC

    @property
    def receiving(self) -> bool:
        """Whether a receive (not an idle long poll) is out: it answers soon."""
        return self._receives > 0

    def arrived(self, arrival: Arrival) -> Optional[Batch]:
        """Account for one receive's answer; the batch it brought, if any."""
        self.asked -= arrival.asked
        if arrival.polled is not None:
            self._polling.discard(arrival.polled.name)
        else:
            self._receives -= 1
        if arrival.error is not None:
            return None
        batch = arrival.batch
        if batch is not None and batch.messages:
            self.idle = False
            if arrival.polled is not None:
                self._next_poll.pop(arrival.polled.name, None)
            return batch
        if arrival.polled is not None:
            self._next_poll[arrival.polled.name] = (arrival.polled_at + MIN_POLL_INTERVAL_SEC,
                                                    self._waited + MIN_POLL_INTERVAL_SEC)
        else:
            self.idle = True
        return None

    def waited(self, seconds: float) -> None:
        """The worker waited ``seconds`` for events and none came: a queue's
        next poll is due after MIN_POLL_INTERVAL_SEC of such waits too, whatever
        the clock says (a test's FakeClock stands still while the worker waits;
        on the machine's clock this never comes first)."""
        self._waited += seconds

    def pause(self, seconds: float) -> None:
        """Start no receive for ``seconds`` (the worker's back-off after an error)."""
        self._paused_until = self.clock.monotonic() + seconds

    def close(self) -> None:
        """Start nothing more; wait for the receives still out (see
        :mod:`kale.worker.answers`): what they bring is released."""
        with self._close_lock:
            self._closed = True
        self._threads.close()
        wait_for_answers(self.out)

    # --- the receiving threads' side ---------------------------------------------

    def _report(self, arrival: Arrival) -> None:
        batch = arrival.batch
        if batch is not None and batch.messages and (self.full or self.doomed(batch)):
            self.give_back(arrival)
        with self._close_lock:
            if not self._closed:
                self.deliver(arrival)
                return
        if arrival.batch is not None and arrival.batch.messages:
            self._release(arrival.batch)

    def give_back(self, arrival: Arrival) -> None:
        """Release what the arrival brought, beside a task it may not outlast or a
        suspect (see full): the worker hears of an empty answer."""
        batch = arrival.batch
        assert batch is not None
        logger.debug('a batch of %d from queue %s arrived while a task runs %s: given back '
                     'at once', len(batch.messages), batch.queue.name,
                     'that may outlast its budget' if self.busy_until else 'beside a suspect')
        self._release(batch)
        arrival.batch = Batch(batch.queue, [], batch.received_at, batch.sqs_name)

    def doomed(self, batch: Batch) -> bool:
        """Whether the batch's budget ends (nearly) before the running task may
        end (see busy_until): nothing of it could start in time."""
        busy = self.busy_until
        return bool(busy) and batch.deadline < busy + SETTLE_MARGIN_SEC

    def _release(self, batch: Batch) -> None:
        try:
            self.consumer.settle(batch)     # no settlements: all released
        except Exception:
            logger.exception('could not release a batch of queue %s', batch.queue.name)

    def _selecting(self) -> _Selecting:
        local = self._local
        if local.selector is None:
            local.found, local.empty = {}, set()
            local.selector = self.selector_class(QueueInfo(self.queues, self._probe))
        return local

    def _probe(self, queue_: TaskQueue) -> bool:
        """A selector's question: a short-poll receive whose messages are kept."""
        local = self._local
        batch = self._receive(queue_, 0, local.ask)
        if batch.messages:
            local.found[queue_.name] = batch
            return True
        local.empty.add(queue_.name)
        return False

    def _answer(self, key: int, failed: Arrival, what: str, receive: Callable[..., None],
                *args: object) -> None:
        """A receive (or poll) out as ``key``: ``receive(*args)`` reports what it
        brings; if it fails, ``failed`` is reported with its error."""
        try:
            receive(*args)
        except Exception as exc:        # the receiving thread must always report back
            if not isinstance(exc, SQSError):
                logger.exception('%s failed', what)
                exc = SQSError(str(exc))
            failed.error = exc
            self._report(failed)
        finally:
            self.out.answered(key)

    def _select(self, ask: int) -> None:
        """One receive: from the queue this thread chose last while it brings full
        batches (up to its ``num_iterations``), else from a new selection's."""
        local = self._selecting()
        local.ask, local.found, local.empty = ask, {}, set()
        continued = local.current is not None and local.left > 0
        chosen = self._next_queue(local)
        batch = self._batch_of(local, chosen, ask)
        if continued and (batch is None or not batch.messages):
            # The queue whose turn went on ran dry: a new selection at once,
            # not the idle watch (every queue long-polled) as if all were empty.
            local.empty.add(chosen.name)
            chosen = self._next_queue(local)
            batch = self._batch_of(local, chosen, ask)
        for other in local.found.values():      # a selector that probed on
            self._report(Arrival(0, batch=other))
        if batch is not None and batch.messages:
            self._report(Arrival(ask, batch=batch))
        else:
            self._report(Arrival(ask, empty=chosen))

    def _next_queue(self, local: _Selecting) -> TaskQueue:
        """The queue chosen last while it has receives left, else a new choice."""
        if local.current is not None and local.left > 0:
            local.left -= 1
            return local.current
        chosen = self._choose(local)
        local.current, local.left = chosen, chosen.num_iterations - 1
        return chosen

    def _batch_of(self, local: _Selecting, chosen: TaskQueue, ask: int) -> Optional[Batch]:
        """The chosen queue's batch: what a probe found, else a receive (none
        when a probe found it empty); a batch short of its ask ends the queue's turn."""
        batch = local.found.pop(chosen.name, None)
        if batch is None and chosen.name not in local.empty:
            batch = self._receive(chosen, 0, ask)
        if batch is None or len(batch.messages) < batch.asked:
            local.left = 0          # (nearly) drained: select again next time
        return batch

    def _choose(self, local: _Selecting) -> TaskQueue:
        """The selector's choice; a random queue when it fails or names a
        queue the worker does not serve (an SQS error passes through)."""
        assert local.selector is not None
        try:
            chosen = local.selector.select()
        except SQSError:
            raise
        except Exception:
            logger.exception('queue selector failed; drawing at random')
            return random.choice(self.queues)
        if chosen not in self.queues:
            logger.error("queue selector chose %r, not one of the worker's queues; drawing at "
                         'random', chosen)
            return random.choice(self.queues)
        return chosen

    def _receive(self, queue_: TaskQueue, wait_sec: int, ask: int) -> Batch:
        prefetch, blind = self.prefetch, False
        if prefetch is not None:
            blind = prefetch.blind(queue_)
            ask = min(ask, prefetch.count(queue_))
        elif queue_.prefetch != AUTO_PREFETCH:
            ask = min(ask, int(queue_.prefetch))
        ask = max(1, min(ask, queue_.batch_size))
        batch = self.consumer.receive(queue_, wait_sec=wait_sec, max_messages=ask)
        batch.asked, batch.blind = ask, blind
        return batch

    # --- idle: every queue long-polled at once ---------------------------------------

    def _watch(self, room: int) -> None:
        if room <= 0:
            return
        now = self.clock.monotonic()
        for queue_ in self.queues:
            due, waited = self._next_poll.get(queue_.name, (0.0, 0.0))
            if queue_.name in self._polling or (now < due and self._waited < waited):
                continue
            ask = max(1, min(room, queue_.batch_size))
            self._polling.add(queue_.name)
            self.asked += ask
            wait = min(queue_.long_poll_time_sec, BURST_POLL_SEC) if self.burst \
                else queue_.long_poll_time_sec
            answer = (self.out.sent(wait), Arrival(ask, polled=queue_, polled_at=now),
                      'long poll on queue %s' % queue_.name, self._poll_once, queue_, wait, ask,
                      now)
            threading.Thread(target=self._answer, args=answer, daemon=True,
                             name='kale-poll-%s' % queue_.name).start()

    def _poll_once(self, queue_: TaskQueue, wait: int, ask: int, started: float) -> None:
        batch = self._receive(queue_, wait, ask)
        self._report(Arrival(ask, batch=batch, polled=queue_, polled_at=started))

