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
- :meth:`run_batch` runs a batch's tasks one by one within its budget;
- :meth:`settle` hands the batch to a thread that releases, copies and
  deletes in batch requests, while the loop receives the next batch;
- :meth:`check_limits` stops the worker when it uses too much memory.

:meth:`Worker.run` returns ``EXIT_OK`` (0) after a shutdown signal or a
finished burst, and ``EXIT_MEMORY_LIMIT`` (3) when resident memory passed
``DIE_ON_RESIDENT_SET_SIZE_MB``. A configuration error raises
ImproperlyConfigured, which ``kale worker`` reports in one line, exiting 1.
"""
from __future__ import annotations

import gc
import logging
import random
from typing import Any, Optional, Sequence

from kale import logs
from kale.app import App, default_app
from kale.broker import Broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.events import HOLDS_GROUP, Settlement, process_identity
from kale.exceptions import SQSError
from kale.hooks import HookDispatcher, WorkerHooks
from kale.queue_config import TaskQueue
from kale.queue_selector import QueueInfo
from kale.timeout import BaseTimeout, SignalTimeout
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch
from kale.worker.burst import BurstEnd
from kale.worker.cancelled import skip_cancelled
from kale.worker.consumer import Consumer
from kale.worker.duplicates import drop_duplicates
from kale.worker.heartbeat import Heartbeat
from kale.worker.limits import (
    EXIT_MEMORY_LIMIT,
    EXIT_OK,
    MemoryLimit,
    resident_set_size_mb,
    supervisor_gone,
    supervisor_pid,
)
from kale.worker.outage import Outage
from kale.worker.parts import load_selector, load_timeout, load_worker_hooks
from kale.worker.prefetch import Prefetch
from kale.worker.receiver import Receiver
from kale.worker.report import Reporter
from kale.worker.runner import TaskRunner
from kale.worker.settler import Settler
from kale.worker.signals import StopSignals, WorkerInterrupt
from kale.worker.suspects import isolate_long, isolate_suspect, release

logger = logging.getLogger('kale.worker')

#: Shortest time between two idle watches, so that queues with
#: long_poll_time_sec 0 are not polled in a tight loop.
IDLE_PAUSE_SEC = 0.25

#: Longest time a stopping worker keeps retrying the requests that settle its
#: last batches while SQS is unreachable.
SHUTDOWN_SETTLE_SEC = 5.0

#: A batch whose tasks take longer than this is settled in parts, as they end,
#: so that what ended is deleted, logged and counted without waiting for the rest.
SETTLE_PARTS_AFTER_SEC = 1.0


class Worker:
    """Runs tasks from the configured queues until stopped."""

    timeout_class: type[BaseTimeout] = SignalTimeout      # how runs are held to their limit

    def __init__(self, queue_names: Optional[Sequence[str]] = None, burst: bool = False,
                 broker: Optional[Broker] = None, hooks: Sequence[Any] = (),
                 selector_class: Any = None, clock: Clock = SYSTEM_CLOCK,
                 app: Optional[App] = None):
        self.app = app or default_app()        # its settings and parts
        config = self.config = self.app.config
        self.clock = clock
        self.broker = broker or self.app.broker
        self.queues = self._choose_queues(queue_names)
        self.burst = burst
        self.name = 'worker %s' % process_identity()[0]
        self.hooks = HookDispatcher(load_worker_hooks(hooks, config))
        self.reporter = Reporter(self.hooks)
        # Asked once: a per-task hook that nobody overrides costs nothing per task.
        self._on_started = self.hooks.overridden(WorkerHooks.on_task_started)
        self._on_finished = self.hooks.overridden(WorkerHooks.on_task_finished)
        # Settling keeps trying until each batch's deadline, stopping or not.
        self.consumer = Consumer(self.broker, clock=clock,
                                 max_backoff_sec=config.SQS_ERROR_MAX_BACKOFF_SEC,
                                 codec=self.app.codec)
        self.prefetch = Prefetch()
        self.receiver = Receiver(self.consumer, self.queues, stopping=lambda: self._stopping,
                                 prefetch=self.prefetch, clock=clock)
        self.queue_info = QueueInfo(self.queues, self.receiver.probe)
        self.selector = load_selector(selector_class, config)(self.queue_info)
        self.runner = TaskRunner(load_timeout(self.timeout_class, config), clock=clock,
                                 isolation=config.TASK_ISOLATION or 'none',
                                 codec=self.app.codec, registry=self.app.registry, config=config)
        self.settler: Optional[Settler] = None
        self.heartbeat = Heartbeat(self.broker, clock=clock)
        self.outage = Outage(self.name, config.SQS_ERROR_MAX_BACKOFF_SEC,
                             config.BURST_GIVE_UP_SEC if burst else None,
                             lambda seconds: self._sleep(seconds), clock=clock)
        self.burst_end = BurstEnd(self.name, wall_clock=clock.time)
        self.memory_limit = MemoryLimit(config.DIE_ON_RESIDENT_SET_SIZE_MB)
        self.signals = StopSignals(self.name, on_stop=self.stop, in_task=lambda: self._in_task)
        self.exit_code = EXIT_OK
        self._idle = False
        self._stopping = False
        self._supervisor_pid = supervisor_pid()
        self._in_task = False

    @property
    def stats(self) -> Any:
        """Settled messages by outcome (a Counter)."""
        return self.reporter.stats

    def _choose_queues(self, names: Optional[Sequence[str]]) -> list[TaskQueue]:
        config = self.broker.queues
        if not names:
            return list(config.values())
        return [config.get_queue(name, who='--queues') for name in dict.fromkeys(names)]

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
            self.signals.restore()
            logs.set_worker(None)
        return self.exit_code

    def work_once(self) -> bool:
        """Batches that already arrived, else one selection and up to
        ``num_iterations`` batches from it, else the idle watch. False once a
        burst has nothing left to do."""
        self.report_settled()
        ready = self.receiver.next_ready()
        if ready is not None:
            self.process(ready)
            return True
        if self._idle:
            return self.idle()
        queue = self.select_queue()
        if queue is None:
            return True
        batch = self.receiver.take(queue)
        if batch is None and not self.receiver.known_empty(queue):
            batch = self.receive(queue)
        if batch is None or not batch.messages:
            self._go_idle()
            return True
        self.process(batch)
        for _ in range(queue.num_iterations - 1):
            if self._stopping or not batch.full or self.receiver.has_ready():
                break           # a short batch means the queue is (nearly) drained
            batch = self.receive(queue)
            if batch is None or not batch.messages:
                break
            self.process(batch)
        self.receiver.done_with(queue)
        return True

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
        """Verify a batch, run it, hand it to the settler, check the limits. A
        suspect message, or else a task longer than the visibility timeout,
        runs last, alone (see :mod:`kale.worker.suspects`); the heartbeat keeps
        a long one invisible from now until it ends."""
        self.verify(batch)
        self.skip_cancelled(batch)
        drop_duplicates(batch)
        self.prefetch.received(batch.queue, sum(
            1 for opened in batch.opened.values() if batch.is_long(opened.task_class.time_limit)))
        alone = isolate_suspect(batch, self.name) or isolate_long(batch)
        if alone is not None:
            self.keep_if_long(alone)
        try:
            self.run_batch(batch)
            self.settle(batch)
            if alone is not None:
                if not self._stopping:
                    assert self.settler is not None
                    self.settler.flush()            # hold nothing else while it runs
                    self.receiver.release_ready()
                    self.run_batch(alone)
                self.settle(alone)
        finally:
            self.heartbeat.stop()
        self.check_limits()

    def keep_if_long(self, alone: Batch) -> None:
        """Start the heartbeat for a batch of one whose task is long."""
        received = alone.messages[0]
        opened = alone.opened.get(received.message_id)
        if opened is not None and alone.is_long(opened.task_class.time_limit):
            self.heartbeat.keep(alone, received)

    def verify(self, batch: Batch) -> None:
        """Verify every message's envelope and find its task; one that fails is
        settled for the dead-letter queue. Payloads are decoded later, one at a
        time, just before each run."""
        for received in batch.messages:
            opened = self.runner.open(batch, received)
            if isinstance(opened, Settlement):
                batch.settlements.append(opened)
            else:
                batch.opened[received.message_id] = opened

    def skip_cancelled(self, batch: Batch) -> None:
        """Settle, unrun, the tasks the hooks say were cancelled (asked once a batch)."""
        skip_cancelled(self.hooks, batch)

    def run_batch(self, batch: Batch) -> None:
        """Run the batch's tasks one by one, in order, while they fit its budget.
        On a FIFO queue, once a group's message is retried or released, the
        group's later messages in the batch are released, not run. Once its
        tasks have taken SETTLE_PARTS_AFTER_SEC, what is decided so far is
        settled while the rest runs."""
        self.hooks(WorkerHooks.before_batch, batch.queue, batch)
        decided = {id(s.received): s for s in batch.settlements}
        last_part = self.clock.monotonic()
        try:
            for received in list(batch.messages):
                settlement = decided.get(id(received))
                if settlement is not None:      # decided before the run (see suspects)
                    if batch.fifo and settlement.outcome in HOLDS_GROUP \
                            and received.group_id != batch.alone_group:
                        batch.held_groups.add(received.group_id)
                    continue
                if self._stopping:
                    break
                settlement = self.run_one(batch, received)
                batch.settlements.append(settlement)
                if batch.fifo and settlement.outcome in HOLDS_GROUP:
                    batch.held_groups.add(received.group_id)
                if self.memory_limit.exceeded():
                    break
                if self.clock.monotonic() - last_part >= SETTLE_PARTS_AFTER_SEC:
                    last_part = self.settle_part(batch)
        except WorkerInterrupt:
            self._stopping = True
        finally:
            self.runner.guard.after_batch()

    def run_one(self, batch: Batch, received: ReceivedMessage) -> Settlement:
        """Run one message's task if it may run now, else release it."""
        if batch.fifo and received.group_id in batch.held_groups:
            return release(batch, received, 'an earlier task of group %r has not completed'
                           % received.group_id)
        opened = batch.opened[received.message_id]
        task_class = opened.task_class
        now = self.clock.monotonic()
        if not batch.fits(task_class.time_limit, now) and not self.heartbeat.keeps(received):
            return release(batch, received, 'time_limit %gs does not fit the %.1fs left in the '
                                            'batch' % (task_class.time_limit, batch.time_left(now)))
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
            self._in_task = False
            self.receiver.busy_until(0.0)
            logs.task_ended(context)
        self.prefetch.ran(batch.queue, settlement.duration_sec)
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

    def settle(self, batch: Batch) -> None:
        """Hand the batch to the settler (inline on a fast endpoint, else its
        threads): release, copy, delete. The next receive does not wait for it."""
        assert self.settler is not None, 'settle() runs inside run()'
        self.hooks(WorkerHooks.before_settle, batch.queue, batch)
        self.settler.submit(batch)

    def report_settled(self) -> None:
        """Log and dispatch hooks for every batch settled since the last call."""
        if self.settler is None:
            return
        for batch in self.settler.completed():
            self.reporter.batch_settled(batch)

    def check_limits(self) -> None:
        """Stop (with EXIT_MEMORY_LIMIT) once resident memory passed the limit,
        or gracefully once the supervisor that started this worker is gone."""
        if supervisor_gone(self._supervisor_pid):
            logger.error('%s: supervisor %d is gone; stopping', self.name, self._supervisor_pid)
            self._stopping = True
        elif self.memory_limit.exceeded():
            logger.error('%s: resident memory %.0f MB is over DIE_ON_RESIDENT_SET_SIZE_MB=%g; '
                         'exiting with code %d', self.name, resident_set_size_mb(),
                         self.memory_limit.limit_mb, EXIT_MEMORY_LIMIT)
            self.exit_code = EXIT_MEMORY_LIMIT
            self._stopping = True

    def drained(self) -> bool:
        """Nothing visible, in flight or delayed on any of this worker's queues."""
        if self.settler is not None:
            self.settler.flush()
            self.report_settled()
        try:
            drained = self.burst_end.drained({q: self.broker.counts(q) for q in self.queues})
        except SQSError as exc:
            self.outage.failed('counting messages', exc)
            return False
        self.outage.reached()
        return drained

    # --- start and stop -------------------------------------------------------------

    def startup(self) -> None:
        """Run the start-up hooks; one that fails stops the worker (HookError)."""
        logger.info('%s: serving queues %s', self.name, ', '.join(q.name for q in self.queues))
        self.hooks.strict(WorkerHooks.on_worker_startup, self)

    def shutdown(self) -> None:
        self.hooks(WorkerHooks.on_worker_shutdown, self)
        logger.info('%s: stopped (%s)', self.name, self.reporter.summary() or 'no tasks')

    def stop(self) -> None:
        """Ask the worker to stop after the running task (what SIGTERM does)."""
        self._stopping = True

    def _sleep(self, seconds: float) -> None:
        """Sleep, waking early when the worker is told to stop."""
        end = self.clock.monotonic() + seconds
        while not self._stopping:
            left = end - self.clock.monotonic()
            if left <= 0:
                return
            self.clock.sleep(min(left, 0.1))

    def _go_idle(self) -> None:
        self._idle = True
        logger.debug('%s: idle, long polling %s', self.name, ', '.join(
            '%s (%d s)' % (q.name, q.long_poll_time_sec) for q in self.queues))
