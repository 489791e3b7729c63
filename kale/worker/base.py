"""What a worker is built from, and the steps that do not depend on its loop.

:class:`WorkerBase` builds a worker's parts from its app (the broker, hooks,
consumer, runner, heartbeat, limits, signals) and holds the steps
:class:`kale.worker.loop.Worker` uses around its loop: verifying a batch,
asking which of its tasks were cancelled, settling, reporting, checking
limits, and starting and stopping.
"""
from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from kale.app import App, default_app
from kale.broker import Broker
from kale.clock import Clock
from kale.events import process_identity
from kale.exceptions import SQSError
from kale.hooks import HookDispatcher, WorkerHooks
from kale.logs import exception_messages
from kale.timeout import BaseTimeout, SignalTimeout
from kale.transport import MAX_DELAY_SEC
from kale.worker.batch import Batch
from kale.worker.burst import BurstEnd
from kale.worker.cancelled import skip_cancelled
from kale.worker.consumer import Consumer
from kale.worker.control import WorkerControl
from kale.worker.flow import FlowGate
from kale.worker.heartbeat import Heartbeat
from kale.worker.limits import EXIT_OK, EXIT_STUCK, MemoryLimit, memory_limit_mb, over_limits, supervisor_pid
from kale.worker.outage import Outage
from kale.worker.parts import (
    choose_queues,
    dead_run_queues,
    load_selector,
    load_timeout,
    load_worker_hooks,
)
from kale.worker.report import Reporter
from kale.worker.runner import TaskRunner
from kale.worker.settler import Settler
from kale.worker.signals import StopSignals
from kale.worker.waiting import send_on_early

logger = logging.getLogger('kale.worker')

#: Longest time a stopping worker keeps retrying the requests that settle its
#: last batches while SQS is unreachable.
SHUTDOWN_SETTLE_SEC = 5.0

#: Shortest time between two idle watches, so that queues with
#: long_poll_time_sec 0 are not polled in a tight loop (and between two
#: counts of the queues by a burst that found them empty).
IDLE_PAUSE_SEC = 0.25


class WorkerBase:
    """A worker's parts and shared steps (see the module docstring)."""

    timeout_class: type[BaseTimeout] = SignalTimeout      # how runs are held to their limit
    #: A failed request to SQS: log, back off (the worker's intake pauses).
    outage: Outage

    def __init__(self, queue_names: Optional[Sequence[str]] = None, burst: bool = False,
                 broker: Optional[Broker] = None, hooks: Sequence[Any] = (),
                 selector_class: Any = None, clock: Optional[Clock] = None,
                 app: Optional[App] = None, pool: Optional[str] = None,
                 max_in_flight: Optional[int] = None, dead_letters: bool = False):
        self.app = app or default_app()        # its settings and parts
        config = self.config = self.app.config
        self.pool = pool or config.WORKER_POOL
        self.clock = clock = clock or self.app.clock
        self.broker = broker or self.app.broker
        self.queues = choose_queues(self.broker.queues, queue_names)
        if dead_letters:            # the dead runs of those queues' tasks
            self.queues = dead_run_queues(self.broker, self.queues)
        self.burst = burst
        #: Receives after which SQS's redrive policy dead-letters a message (0:
        #: none); a suspect on its last one is given back (see kale.worker.suspects).
        self.redrive_after = self.broker.max_receive_count if self.broker.dead_letters else 0
        self.name = 'worker %s' % process_identity()[0]
        self.selector_class = load_selector(selector_class, config)
        self.hooks = HookDispatcher(load_worker_hooks(hooks, config))
        self.reporter = Reporter(self.hooks, exception_messages=exception_messages(config))
        self._asks_unrun = self.hooks.overridden(WorkerHooks.succeeded_tasks) or \
            self.hooks.overridden(WorkerHooks.cancelled_tasks)
        # Settling keeps trying until each batch's deadline, stopping or not.
        self.consumer = Consumer(self.broker, clock=clock,
                                 max_backoff_sec=config.SQS_ERROR_MAX_BACKOFF_SEC,
                                 codec=self.app.codec)
        self.runner = TaskRunner(load_timeout(self.timeout_class, config), clock=clock,
                                 isolation=config.TASK_ISOLATION or 'none', app=self.app)
        self.hooks.awaiter = self.runner.await_hook     # coroutine hooks run on its loop
        self.settler: Optional[Settler] = None
        self.heartbeat = Heartbeat(self.broker, clock=clock)
        #: What operators ask of it through the records (kale.worker.control).
        self.obey = WorkerControl(self.name, self, self.consumer.pauses,
                                  [queue.name for queue in self.queues])
        self.flow = FlowGate(config, self.app.codec, clock=clock)
        self.burst_end = BurstEnd(self.name, wall_clock=clock.time)
        self.memory_limit = MemoryLimit(memory_limit_mb(config, self.broker.transport))
        self.signals = StopSignals(self.name, on_stop=self.stop, in_task=lambda: self._in_task)
        self.exit_code = EXIT_OK
        self._stopping = False
        self._supervisor_pid = supervisor_pid()
        self._in_task = False

    @property
    def stats(self) -> Any:
        """Settled messages by outcome (a Counter)."""
        return self.reporter.stats

    # --- shared steps ------------------------------------------------------------------

    def verify(self, batch: Batch) -> None:
        """Verify every message's envelope and find its task; one that fails is
        settled for the dead-letter queue. Payloads are decoded later, one at a
        time, just before each run (see :meth:`TaskRunner.open_batch`)."""
        self.runner.open_batch(batch)

    def skip_cancelled(self, batch: Batch) -> None:
        """Settle, unrun, the tasks the hooks say were cancelled (asked once a
        batch, when a hook can say: decided when the worker starts)."""
        if self._asks_unrun:
            skip_cancelled(self.hooks, batch)

    def send_on_early(self, batch: Batch) -> None:
        """Settle, unrun, the tasks that arrived before their due time: each is
        sent on, delayed by the time still to wait (see :mod:`kale.worker.waiting`)."""
        if batch.has_due:
            send_on_early(batch, self.clock.time(), self.app.codec)

    def settle(self, batch: Batch) -> None:
        """Hand the batch to the settler (inline on a fast endpoint, else its
        threads): release, copy, delete. The next receive does not wait for it."""
        assert self.settler is not None, 'settle() runs inside run()'
        self.hooks(WorkerHooks.before_settle, batch.queue, batch)
        self.flow.settled(batch)            # its slots of concurrency limits are free
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
        code = over_limits(self.name, self._supervisor_pid, self.memory_limit)
        if code is not None:
            self.exit_code = code
            self._stopping = True

    def stuck(self, what: str) -> None:
        """A task did not come back from its time limit: stop, exiting EXIT_STUCK."""
        logger.error('%s: %s; exiting with code %d', self.name, what, EXIT_STUCK)
        self.exit_code = EXIT_STUCK
        self._stopping = True

    def drained(self) -> bool:
        """Nothing visible, in flight or delayed on any of this worker's queues,
        by two counts in a row: SQS counts each figure apart, so a message
        whose delay ends meanwhile can be in neither the delayed nor the
        visible figure of one answer."""
        if self.settler is not None:
            self.settler.flush()
            self.report_settled()
        try:
            drained = self._drained_once() and self._drained_once()
        except SQSError as exc:
            self.outage.failed('counting messages', exc)
            return False
        self.outage.reached()
        return drained

    def _drained_once(self) -> bool:
        """One count of the queues, judged with what this worker and the records know."""
        counts = {q: self.broker.counts(q) for q in self.queues}
        answers = [answer for answer in self.hooks.collect(
            WorkerHooks.tasks_due_after, self.clock.time() + MAX_DELAY_SEC)
            if answer is not None] if any(c.delayed for c in counts.values()) else []
        due_later = {name: due for answer in answers for name, due in answer.items()} \
            if answers else None
        waiting = self.reporter.waiting
        return self.burst_end.drained(counts, waiting.count, due_later, waiting.retries)

    # --- start and stop -------------------------------------------------------------

    def startup(self) -> None:
        """Run the start-up hooks; one that fails stops the worker (HookError)."""
        logger.info('%s: serving queues %s', self.name, ', '.join(q.name for q in self.queues))
        self.broker.declare_all(self.queues)        # their URLs at once, not one per first receive
        self.flow.start()
        self.hooks.strict(WorkerHooks.on_worker_startup, self)

    def shutdown(self) -> None:
        self.hooks(WorkerHooks.on_worker_shutdown, self)
        logger.info('%s: stopped (%s)', self.name, self.reporter.summary() or 'no tasks')

    def stop(self) -> None:
        """Ask the worker to stop after the running task (what SIGTERM does)."""
        self._stopping = True

