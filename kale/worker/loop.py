"""The worker: select a queue, receive batches, run tasks, settle, check limits.

    from kale import worker
    worker.Worker().run()

One worker process runs the loop of :meth:`Worker.work_once` until it is
told to stop. Each step is a method of its own:

- :meth:`select_queue` asks the ``QUEUE_SELECTOR`` which queue to serve
  (its probes keep what they receive as the first batch);
- :meth:`receive` receives the next batch (up to ``num_iterations`` batches in
  a row, stopping at an empty one);
- :meth:`idle`, when every queue looked empty, long-polls them all at once;
- :meth:`skip_cancelled` asks the hooks once which of a batch's tasks were
  cancelled, and settles those unrun (and a task's extra copies);
  :meth:`send_on_early` sends on those that arrived before their due time;
- :meth:`run_batch` runs a batch's tasks one by one within its budget (each
  takes its token of a rate limit and its slot of a concurrency limit as it
  starts, or is released, delayed: :mod:`kale.worker.flow`);
- :meth:`settle` hands the batch to a thread that releases, copies and
  deletes in batch requests, while the loop receives the next batch;
- :meth:`check_limits` stops the worker when it uses too much memory.

:meth:`Worker.run` returns an exit code of :mod:`kale.worker.limits`. This
is the serial pool; :mod:`kale.worker.flight` runs many tasks at once.
"""
from __future__ import annotations

import functools
import gc
import logging
import random
from typing import Any, Callable, Optional, Sequence

from kale import logs
from kale.app import default_app
from kale.events import HOLDS_GROUP, Settlement, process_identity
from kale.exceptions import SQSError
from kale.hooks import WorkerHooks
from kale.queue_config import TaskQueue
from kale.queue_selector import QueueInfo
from kale.transport import ReceivedMessage
from kale.worker.base import IDLE_PAUSE_SEC, SHUTDOWN_SETTLE_SEC, WorkerBase
from kale.worker.batch import Batch
from kale.worker.duplicates import drop_duplicates
from kale.worker.limits import TaskStuck
from kale.worker.prefetch import Prefetch
from kale.worker.receiver import Receiver
from kale.worker.settler import Settler
from kale.worker.signals import WorkerInterrupt
from kale.worker.suspects import isolate_long, isolate_suspects, release

logger = logging.getLogger('kale.worker')

#: A batch whose tasks take longer than this is settled in parts, as they end,
#: so that what ended is deleted, logged and counted without waiting for the rest.
SETTLE_PARTS_AFTER_SEC = 1.0


class Worker(WorkerBase):
    """Runs tasks from the configured queues until stopped, one at a time.
    ``Worker(pool='threads'|'asyncio')`` (or the ``WORKER_POOL`` setting)
    makes a :class:`~kale.worker.flight.FlightWorker` instead."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Worker:
            app = kwargs.get('app') or default_app()
            if (kwargs.get('pool') or app.config.WORKER_POOL) != 'serial':
                from kale.worker.flight import FlightWorker
                return FlightWorker(*args, **kwargs)    # not a Worker: made whole here
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prefetch = Prefetch()
        self.receiver = Receiver(self.consumer, self.queues, stopping=lambda: self._stopping,
                                 prefetch=self.prefetch, clock=self.clock,
                                 settling_behind=lambda: self.settler is not None
                                 and self.settler.full())
        self.queue_info = QueueInfo(self.queues, self.receiver.probe)
        self.selector = self.selector_class(self.queue_info)
        self._idle = False

    # --- the loop ---------------------------------------------------------

    def run(self) -> int:
        """Work until a signal, a finished burst or the memory limit; returns the exit code."""
        self.signals.install()
        self.runner.guard.setup()
        self.settler = Settler(self.consumer, clock=self.clock)
        logs.set_worker(process_identity()[0])
        try:
            self.startup()
            gc.freeze()         # start-up's objects live on: full collections skip them
            try:
                while not self._stopping:
                    try:
                        if not self.work_once():
                            break
                    except WorkerInterrupt:     # a stop request that cut a step short
                        self._stopping = True
            finally:
                # Settle what is left, but do not wait out an outage to do it:
                # what cannot be settled reappears after its visibility timeout.
                self.consumer.give_up_at = self.clock.monotonic() + SHUTDOWN_SETTLE_SEC
                self.receiver.close()
                self.settler.close()
                self.heartbeat.close()
                self.report_settled()
                self.shutdown()
        finally:
            gc.unfreeze()           # a worker run in a longer process gives them back
            self.runner.guard.teardown()
            self.runner.close()
            self.signals.restore()
            logs.set_worker(None)
        return self.exit_code

    def work_once(self) -> bool:
        """Batches that already arrived, else one selection and up to
        ``num_iterations`` batches from it, else the idle watch; nothing is
        received while settling is behind (see :mod:`kale.worker.settler`).
        False once a burst has nothing left to do."""
        self.report_settled()
        ready = self.receiver.next_ready()
        if ready is not None:
            self.process(ready)
            return True
        assert self.settler is not None
        if self.settler.full():
            self.settler.wait_until_not_full()  # receive only what can be settled
        if self._idle:
            return self.idle()
        queue = self.select_queue()
        if queue is None:
            return True
        batch = self._first_batch(queue)
        if batch is None or not batch.messages:
            self._go_idle()
            return True
        self.process(batch)
        self._serve(queue, batch)
        self.receiver.done_with(queue)
        return True

    def _first_batch(self, queue: TaskQueue) -> Optional[Batch]:
        """The selected queue's first batch: what its probe kept, else a receive
        (none when its probe found it empty)."""
        batch = self.receiver.take(queue)
        if batch is None and not self.receiver.known_empty(queue):
            batch = self.receive(queue)
        return batch

    def _serve(self, queue: TaskQueue, batch: Batch) -> None:
        """Receive and process the queue's next batches, up to its
        ``num_iterations`` in all, while they come full."""
        for _ in range(queue.num_iterations - 1):
            if self._stopping or not batch.full or self.receiver.has_ready():
                break           # a short batch means the queue is (nearly) drained
            assert self.settler is not None
            self.settler.wait_until_not_full()
            received = self.receive(queue)
            if received is None or not received.messages:
                break
            batch = received
            self.process(batch)

    # --- steps --------------------------------------------------------------

    def select_queue(self) -> Optional[TaskQueue]:
        """The queue to serve next, or None after an SQS error (already backed off).
        Probing a queue keeps what it receives as that queue's next batch."""
        self.receiver.new_selection()
        try:
            queue = self.selector.select()
        except SQSError as exc:
            self.outage.failed('selecting a queue', exc)
            return None
        except Exception:
            logger.exception('%s: queue selector failed; drawing at random', self.name)
            queue = random.choice(self.queues)
        if queue not in self.queues:
            logger.error('%s: queue selector chose %r, not one of the worker\'s queues; drawing '
                         'at random', self.name, queue)
            queue = random.choice(self.queues)
        self.outage.reached()
        return queue

    def receive(self, queue: TaskQueue) -> Optional[Batch]:
        """The next batch of a busy queue; None after an SQS error (already backed off)."""
        try:
            batch = self.receiver.receive(queue)
        except SQSError as exc:
            self.outage.failed('receiving from queue %s' % queue.name, exc)
            return None
        self.outage.reached()
        return batch

    def idle(self) -> bool:
        """Every queue looked empty: long-poll them all at once, each again as
        soon as it answers, until one has work. A burst checks between rounds
        whether it is done (False once it is); a serving worker checks its
        limits every second meanwhile."""
        if self.burst and self.drained():
            logger.info('%s: every queue is drained, burst finished', self.name)
            return False
        started = self.clock.monotonic()
        try:
            arrived = self.receiver.watch(each_once=self.burst)   # ends soon after a stop
        except SQSError as exc:
            self.outage.failed('long polling', exc)
            return True
        self.outage.reached()
        if arrived:
            self._idle = False                 # work_once takes them one by one
        elif not self.burst:
            self.check_limits()
        elif self.clock.monotonic() - started < IDLE_PAUSE_SEC:
            self._sleep(IDLE_PAUSE_SEC)
        return True

    def process(self, batch: Batch) -> None:
        """Verify a batch, run it, hand it to the settler, check the limits.
        Suspect messages (a group of them, see :mod:`kale.worker.suspects`),
        or else a task longer than the visibility timeout, run last, with
        nothing else held; the heartbeat keeps a long one invisible from now
        until it ends."""
        self.verify(batch)
        self.skip_cancelled(batch)
        drop_duplicates(batch)
        self.send_on_early(batch)
        alone = self._set_aside(batch)
        given_back = self._give_back_now(batch) if batch.may_hold_suspect else []
        if alone is not None:
            self.keep_if_long(alone)
        try:
            self.run_batch(batch)
            self.settle(batch)
            if alone is not None:
                self._run_alone(batch.settlements + given_back, alone)
        finally:
            self.heartbeat.stop()
        self.check_limits()

    def _set_aside(self, batch: Batch) -> Optional[Batch]:
        """Take out of the batch what runs last with nothing else held: its
        suspects' group, or else a long task; the prefetch learns how many
        long tasks came."""
        longs = [cls for cls in batch.task_classes if batch.is_long(cls.time_limit)]
        self.prefetch.received(batch.queue, sum(
            1 for opened in batch.opened.values() if opened.task_class in longs) if longs else 0)
        return isolate_suspects(batch, self.redrive_after, self.name) or (
            isolate_long(batch) if longs else None)

    def _give_back_now(self, batch: Batch) -> list[Settlement]:
        """Settle at once what a batch that may hold suspects decided before
        running (suspects given back among it): none stays held while the
        rest runs. Its settlements."""
        part = batch.split_decided() if not batch.fifo else None
        if part is None:
            return []
        self.settle(part)
        return part.settlements

    def _run_alone(self, settlements: list[Settlement], alone: Batch) -> None:
        """Run what was set aside (a suspects' group, a long task) once the
        rest is settled, holding nothing else meanwhile. When some of the rest
        could not be settled (SQS refused or was down; a lapsed one is SQS's
        again), the worker still holds them: what was set aside is released
        unrun (a suspect that kills its worker would count another delivery
        against each of them, until SQS's redrive policy dead-letters them)."""
        if not self._stopping:
            assert self.settler is not None
            self.settler.flush()            # hold nothing else while it runs
            self.receiver.release_ready()
            held = [s for s in settlements if not (s.settled or s.lapsed)]
            if not held:
                # Each run settled as it ends: a suspect that kills the worker
                # later in the group does not undo the runs before it. What
                # a poll still out brings meanwhile goes back at once.
                self.receiver.alone = True
                try:
                    self.run_batch(alone, parts_after=0.0)
                finally:
                    self.receiver.alone = False
            else:
                logger.warning('%s: %d message(s) of the batch are still held (settling '
                               'failed): %s released, not run now', self.name,
                               len(held), ', '.join(m.message_id for m in alone.messages))
        self.settle(alone)

    def keep_if_long(self, alone: Batch) -> None:
        """Start the heartbeat for a batch of one whose task is long."""
        received = alone.messages[0]
        opened = alone.opened.get(received.message_id)
        if opened is not None and alone.is_long(opened.task_class.time_limit):
            self.heartbeat.keep(alone, received)

    def run_batch(self, batch: Batch, parts_after: Optional[float] = None) -> None:
        """Run the batch's tasks one by one, in order, while they fit its budget.
        On a FIFO queue, once a group's message is retried or released, the
        group's later messages in the batch are released, not run. Once its
        tasks have taken ``parts_after`` seconds (SETTLE_PARTS_AFTER_SEC by
        default), what is decided so far is settled while the rest runs. A blind batch (see
        :mod:`kale.worker.prefetch`) gives back what has not started once the
        prefetch window has passed."""
        self.hooks(WorkerHooks.before_batch, batch.queue, batch)
        decided = _by_message(batch.settlements)
        last_part = started = self.clock.monotonic()
        if parts_after is None:
            parts_after = SETTLE_PARTS_AFTER_SEC
        # A blind batch gives back what has not started within the window.
        give_back_at = started + self.prefetch.window_sec if batch.blind else 0.0
        ran = 0
        pending = list(batch.messages)
        try:
            for index, received in enumerate(pending):
                settlement = decided.get(id(received))
                if settlement is not None:      # decided before the run (see suspects)
                    _hold_decided(batch, received, settlement)
                    continue
                if self._stopping:
                    break
                known = len(batch.settlements)
                try:
                    settlement = self.run_one(batch, received, functools.partial(
                        _undecided, pending[index + 1:], decided))
                except TaskStuck as stuck:      # left to SQS: back after its visibility timeout
                    batch.messages.remove(received)
                    self.stuck(str(stuck))
                    break
                decided.update(_by_message(batch.settlements[known:]))   # refused meanwhile
                batch.settlements.append(settlement)
                ran += 1
                if batch.fifo and settlement.outcome in HOLDS_GROUP:
                    batch.held_groups.add(received.group_id)
                if self.memory_limit.exceeded():
                    break
                now = self.clock.monotonic()
                if give_back_at and now >= give_back_at:
                    give_back_at = 0.0
                    _give_back(batch, pending[index + 1:], decided, self.prefetch.window_sec)
                if now - last_part >= parts_after:
                    last_part = self.settle_part(batch)
        except WorkerInterrupt:
            self._stopping = True
        finally:
            self.receiver.busy_until(0.0)       # each run sets it (run_one); none runs now
            self.runner.guard.after_batch()
            self._note_run_time(batch.queue, started, ran)

    def _note_run_time(self, queue: TaskQueue, started: float, ran: int) -> None:
        """Tell the prefetch the mean run time of the ``ran`` tasks run since
        ``started``, once a batch (what the next receive asks)."""
        if ran:
            self.prefetch.ran(queue, (self.clock.monotonic() - started) / ran)

    def run_one(self, batch: Batch, received: ReceivedMessage,
                later: Callable[[], Sequence[ReceivedMessage]] = list) -> Settlement:
        """Run one message's task if it may run now, else release it. Its
        token and slot of a flow limit are taken as it starts (with those of
        the ``later()`` ones that start soon after: see FlowGate.before_run)."""
        if batch.fifo and received.group_id in batch.held_groups:
            return release(batch, received, 'an earlier task of group %r has not completed'
                           % received.group_id)
        opened = batch.opened[received.message_id]
        task_class = opened.task_class
        now = self.clock.monotonic()
        if not batch.fits(task_class.time_limit, now) and not self.heartbeat.keeps(received):
            return release(batch, received, 'time_limit %gs does not fit the %.1fs left in the '
                                            'batch' % (task_class.time_limit, batch.time_left(now)))
        if self.flow.limits(task_class):
            refused, others = self.flow.before_run(batch, received, later(),
                                                   self.prefetch.mean_run_sec(batch.queue))
            batch.settlements.extend(others)        # refused now, decided before their turn
            if refused is not None:
                return refused
        message = self.runner.read(batch, received, opened)
        if isinstance(message, Settlement):
            return message
        if self._on_started:
            self.hooks(WorkerHooks.on_task_started, batch.queue, received, message)
        self._in_task = True
        # What waits for the worker and cannot outlast this run goes back at once.
        self.receiver.busy_until(now + task_class.time_limit)
        context = logs.task_started(message.task_id, message.task_name, batch.queue.name,
                                    message.attempt)
        try:
            settlement = self.runner.run(batch, received, message, task_class,
                                         opened.envelope)
        finally:
            self._in_task = False       # still busy until the next run says (see run_batch)
            logs.task_ended(context)
        if self._on_finished:
            self.hooks(WorkerHooks.on_task_finished, settlement)
        return settlement

    def settle_part(self, batch: Batch) -> float:
        """Settle and report what of the batch is decided, while the rest
        still runs; returns when."""
        part = batch.split_decided()
        if part is not None:
            self.settle(part)
            self.report_settled()
        return self.clock.monotonic()

    def _go_idle(self) -> None:     # every queue looked empty
        self._idle = True
        logger.debug('%s: idle, long polling %s', self.name, ', '.join(
            '%s (%d s)' % (q.name, q.long_poll_time_sec) for q in self.queues))


def _undecided(messages: list[ReceivedMessage], decided: dict[int, Settlement]
               ) -> list[ReceivedMessage]:
    return [received for received in messages if id(received) not in decided]


def _by_message(settlements: list[Settlement]) -> dict[int, Settlement]:
    """The settlements decided before a run, by their received message's id()."""
    return {id(s.received): s for s in settlements}


def _give_back(batch: Batch, unstarted: list[ReceivedMessage],
               decided: dict[int, Settlement], window_sec: float) -> None:
    """Release the messages of a blind batch that did not start within the
    prefetch window, for any worker to take (see :mod:`kale.worker.prefetch`)."""
    for received in unstarted:
        if id(received) not in decided:
            settlement = release(batch, received, 'not started within %gs of its receive: '
                                                  'given back for any worker to take'
                                 % window_sec)
            batch.settlements.append(settlement)
            decided[id(received)] = settlement


def _hold_decided(batch: Batch, received: ReceivedMessage, settlement: Settlement) -> None:
    """FIFO: a message decided before the run (see suspects) that stays in its
    group holds back the group's later messages, unless its group runs alone."""
    if batch.fifo and settlement.outcome in HOLDS_GROUP \
            and received.group_id != batch.alone_group:
        batch.held_groups.add(received.group_id)
