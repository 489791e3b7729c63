"""The worker: receive, verify, start, settle, report; one engine for every pool.

Its loop is a handful of named steps around one queue of events (a receive
answered, a task ended, a task is stuck): docs/explanation/internals-worker.md, "The loop".
"""
from __future__ import annotations

import collections
import gc
import logging
import queue
from typing import Any, Optional

from kale import logs
from kale.clock import SYSTEM_CLOCK
from kale.events import HOLDS_GROUP, process_identity
from kale.exceptions import ImproperlyConfigured
from kale.hooks import WorkerHooks
from kale.worker.base import IDLE_PAUSE_SEC, SHUTDOWN_SETTLE_SEC
from kale.worker.batch import Batch
from kale.worker.caps import SuspectCaps
from kale.worker.duplicates import drop_duplicates
from kale.worker.gather import Gatherer
from kale.worker.intake import MAX_ASK, READ_AHEAD_BATCHES, Arrival, Intake
from kale.worker.jobs import Job, JobRunner, may_start
from kale.worker.outage import Outage
from kale.worker.pools import DEFAULT_IN_FLIGHT, pool_of
from kale.worker.prefetch import Prefetch, Reserve, long_tasks
from kale.worker.serial import SerialRuns
from kale.worker.settler import Settler
from kale.worker.signals import WorkerInterrupt
from kale.worker.stopping import Stopping
from kale.worker.suspects import Suspect, suspects_of
from kale.worker.threads import ThreadGuard, Threads
from kale.worker.watchdog import Watchdog

logger = logging.getLogger('kale.worker')

#: Longest the loop waits for an event before it looks after itself.
TICK_SEC = 0.1
#: How long a worker on a clock of its own waits for events in real time
#: before its clock's time passes (see Worker.take_events).
NO_WAIT_SEC = 0.001
#: Receives at once, at most (each brings up to ten messages).
MAX_RECEIVES = 8


class Worker(SerialRuns):
    """Runs its pool's tasks from its queues until stopped (how: docs/explanation/internals-worker.md)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        config = self.config
        if self.pool not in DEFAULT_IN_FLIGHT:
            raise ImproperlyConfigured('WORKER_POOL: no pool %r (one of %s)'
                                       % (self.pool, ', '.join(DEFAULT_IN_FLIGHT)))
        self.pooled = pool = pool_of(self.pool, int(kwargs.get('max_in_flight') or
                                                    config.WORKER_MAX_IN_FLIGHT or 0))
        self.inline = pool.inline
        self.max_in_flight = pool.in_flight
        self.events: 'queue.SimpleQueue[tuple[str, Any]]' = queue.SimpleQueue()
        self.watchdog = Watchdog(config.WORKER_STUCK_GRACE_SEC,
                                 on_stuck=lambda job: self.events.put(('stuck', job)))
        self.guard: Optional[ThreadGuard] = None
        self.threads: Optional[Threads] = None
        #: How much the serial pool's receives ask (see kale.worker.prefetch).
        self.prefetch = Prefetch() if self.inline else None
        if not self.inline:         # (the serial pool keeps its SIGALRM guard)
            self.runner.guard = self.guard = ThreadGuard(self.watchdog,
                                                         passes_through=(WorkerInterrupt,))
            self.threads = Threads(self.max_in_flight)
        self.jobs = JobRunner(self.runner, self.hooks, self.threads, self.watchdog, self.events)
        self.stopping = Stopping(self.name, self.jobs, self.clock)
        self.intake = Intake(self.consumer, self.queues, self.selector_class,
            lambda arrival: self.events.put(('arrival', arrival)),
            max_receives=1 + READ_AHEAD_BATCHES if self.inline
            else min(MAX_RECEIVES, -(-self.max_in_flight // 10)),
            clock=self.clock, inline=self.inline, prefetch=self.prefetch, burst=self.burst)
        self.outage = Outage(self.name, config.SQS_ERROR_MAX_BACKOFF_SEC,
                             config.BURST_GIVE_UP_SEC if self.burst else None,
                             self.intake.pause, clock=self.clock)
        self.gatherer = Gatherer(self.settle, clock=self.clock,
                                 busy=lambda: self.settler is not None and self.settler.busy())
        self.waiting: list[Job] = []
        self.suspects = SuspectCaps(self.name)      # the suspects held, and their cap
        self.running: set[Job] = set()
        self._groups: set[tuple[str, str]] = set()
        self._per_class: collections.Counter[type] = collections.Counter()
        self._limits_checked = 0.0
        self._counted_at = 0.0          # when a burst last asked the queues' counts
        #: Seconds waited for events in vain since then: a burst asks again after
        #: IDLE_PAUSE_SEC of them too, whatever its clock says (a FakeClock
        #: stands still while the worker waits on its events).
        self._idle_waited = 0.0
        self.reserve = Reserve(self.max_in_flight, lambda: self.consumer.recent_receive_sec,
                               self.clock, every_sec=TICK_SEC)

    # --- the loop -----------------------------------------------------------------

    def run(self) -> int:
        """Work until a signal, a finished burst, the memory limit or a stuck
        task; returns the exit code."""
        self.signals.install()
        if self.inline:
            self.runner.guard.setup()       # its SIGALRM handler, once for every run
        pool = self.pooled
        self.settler = Settler(self.consumer, clock=self.clock, threads=pool.settle_threads,
                               max_pending=pool.max_pending,
                               inline_below_sec=pool.inline_settle_below_sec,
                               on_free=lambda: self.events.put(('settled', None)))
        logs.set_worker(process_identity()[0])
        self._limits_checked = self.clock.monotonic()
        try:
            self.startup()
            if self.pool == 'asyncio':
                self.watchdog.watch_loop(self.runner.loop,
                                        lambda: self.jobs.holding_the_loop(self.running))
            gc.freeze()
            try:
                self.refill()           # the first receives go out before the loop first waits
                while self.work_once():
                    pass
            finally:
                self.finish()
        finally:
            gc.unfreeze()
            if self.inline:
                self.runner.guard.teardown()
            self.signals.restore()
            self.watchdog.close()
            self.runner.close()
            if self.threads is not None:
                self.threads.close()
            logs.set_worker(None)
        return self.exit_code

    def work_once(self) -> bool:
        """One round of the loop; False once the worker is done."""
        self.report_settled()
        due = self.gatherer.due_in()
        waited = self.take_events(TICK_SEC if due is None else min(due, TICK_SEC))
        if waited:
            self._idle_waited += waited
            self.intake.waited(waited)
        if self.inline and self.waiting and self.intake.reads_ahead():
            self.refill()               # the next batches arrive while these run
        self.start_waiting()
        self.gatherer.flush(everything=not self.running)
        if self._stopping:
            return self._still_running()
        if self.burst and self.burst_done():
            return False
        self.refill()
        now = self.clock.monotonic()
        if now - self._limits_checked >= TICK_SEC * 10:
            self._limits_checked = now
            self.check_limits()
        return True

    # --- steps ------------------------------------------------------------------------

    def take_events(self, wait_sec: float) -> float:
        """Wait up to ``wait_sec`` for events, then handle every one there is;
        the seconds waited in vain (0 when an event came). On a clock of
        its own (a test's), the wait is the clock's: its time passes."""
        real = self.clock is SYSTEM_CLOCK
        try:
            event = self.events.get(timeout=wait_sec if real else NO_WAIT_SEC)
        except queue.Empty:
            if not real:
                self.clock.sleep(wait_sec)
            return wait_sec
        self.events_seen = -1                   # (see SerialRuns._busy)
        while True:
            kind, value = event
            if kind == 'done':
                self.finished(value)
            elif kind == 'arrival':
                self.arrived(value)
            elif kind == 'settled':
                pass                            # (a receive held back may go out now)
            else:
                self.stuck_job(value)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return 0.0

    def arrived(self, arrival: Arrival) -> None:
        """A receive answered: admit its batch, or back off after its error."""
        batch = self.intake.arrived(arrival)
        if arrival.error is not None:
            self.outage.failed('receiving', arrival.error)
            return
        self.outage.reached()
        if batch is not None:
            self.admit(batch)

    def admit(self, batch: Batch) -> None:
        """Verify a batch that arrived; its messages wait to start (a suspect
        with its group's cap). What is decided before running is settled."""
        if self._stopping:
            self.settle(batch)                  # nothing settled: every message released
            return
        self.runner.open_batch(batch)           # (see verify)
        longs = long_tasks(batch)
        batch.has_long = longs > 0
        if self.prefetch is not None:
            self.prefetch.received(batch.queue, longs)
        self.skip_cancelled(batch)
        drop_duplicates(batch)
        self.send_on_early(batch)
        suspects = suspects_of(batch, self.redrive_after) if batch.may_hold_suspect else None
        decided = batch.split_decided()
        if decided is not None:
            self.gatherer.add(decided)
        if batch.messages:
            self._wait_for(batch, longs, suspects)
        if not suspects and self.suspects.recent:
            self.suspects.recent = 0            # batches come without suspects again

    def _wait_for(self, batch: Batch, longs: int, suspects: Optional[list[Suspect]]) -> None:
        """The batch's messages wait to start, as jobs (the serial pool's share their batch)."""
        self.hooks(WorkerHooks.before_batch, batch.queue, batch)
        jobs = [Job(batch, received, batch.opened[received.message_id]) if self.inline
                else Job.of(batch, received) for received in batch.messages]
        if self.inline and longs:
            jobs = self.long_last(batch, jobs)
        if suspects:
            self.suspects.hold(batch, jobs, suspects)
        self.waiting.extend(jobs)
        self.doomed_from = 0.0              # (see SerialRuns._busy)

    def start_waiting(self) -> None:
        """Start what waits while there is room, in order, and within the cap of the
        suspects held; give back what no longer fits its budget."""
        if self._stopping or not self.waiting:
            return
        now = self.clock.monotonic()
        if self.suspects.jobs and not self._within_cap(now):
            return
        if self.inline:
            self._run_in_order()
        else:
            self._start_in_order(now)

    def _start_in_order(self, now: float) -> None:
        """Start what waits and finds room, in order; the flow-limited take their
        tokens and slots as they start (the refused leave their room to the next)."""
        while self.waiting:
            starting, self.waiting = may_start(  # (what no longer fits is given back)
                [job for job in self.waiting if self._fits(job, now)],
                self.max_in_flight - len(self.running), self._groups, self._per_class)
            refused = {id(batch): settlement for batch, settlement in
                       self.flow.refusals([(job.batch, job.received) for job in starting])}
            for job in starting:
                settlement = refused.get(id(job.batch))
                if settlement is None:
                    self.start(job, now)
                else:
                    self._settle_unrun(job, settlement)
            if not refused:
                break
        self.jobs.flush()

    def start(self, job: Job, now: float) -> None:
        """Run the job's task: a coroutine task on the event loop, another on a thread."""
        job.started = now
        self.running.add(job)
        if job.group is not None:
            self._groups.add(job.group)
        self._per_class[job.task_class] += 1
        if job.batch.is_long(job.task_class.time_limit):
            job.long = True
            self.heartbeat.keep(job.batch, job.received)
        self.jobs.start(job, now)

    def finished(self, job: Job) -> None:
        """A job's task ended: free its place and settle it (soon, with others);
        not one given up while stopping, whose message went back then."""
        if job not in self.running:
            return
        self._free(job)
        settlement = job.settlement
        assert settlement is not None
        if settlement.duration_sec:
            self.reserve.ran(settlement.duration_sec)
        self._decided(job, settlement)
        if job.group is not None and settlement.outcome in HOLDS_GROUP:
            self._hold_group(job.group, job.received.group_id)
        if self.memory_limit.exceeded():
            self.check_limits()

    def refill(self) -> None:
        """Ask the intake for as many messages as there is room for, and the reserve
        (:class:`~kale.worker.prefetch.Reserve`), within the suspects' cap; none
        while settling is behind. The serial pool asks for a batch, or reads ahead."""
        held = self.max_in_flight + self.reserve.count() if not self.inline \
            else MAX_ASK * (1 + READ_AHEAD_BATCHES) if self._reads_ahead() else MAX_ASK
        room = min(held, self.suspects.room()) - len(self.running) - len(self.waiting)
        self.intake.full = bool(self.suspects.jobs) and room <= 0
        if not (self.settler is not None and self.settler.full()):
            self.intake.refill(room)

    def burst_done(self) -> bool:
        """Once a selection found every queue empty, the worker holds nothing, and the
        queues' counts agree (asked at most every IDLE_PAUSE_SEC)."""
        if not self.intake.idle or self.running or self.waiting or self.gatherer:
            return False
        now = self.clock.monotonic()
        if now < self._counted_at + IDLE_PAUSE_SEC and self._idle_waited < IDLE_PAUSE_SEC:
            return False
        self._counted_at, self._idle_waited = now, 0.0
        if self.drained():
            logger.info('%s: every queue is drained, burst finished', self.name)
            return True
        return False

    def stop(self) -> None:
        """The first call (SIGTERM) stops receiving and lets running tasks end;
        a second signal stops them too."""
        self._stopping = True
        if self.signals.count >= 2:
            if self.guard is not None:
                self.guard.stop_all(WorkerInterrupt)
            self.runner.stop_coroutines()
            self.stopping.second_signal()

    def finish(self) -> None:
        """Release what waits, settle what ended, stop the intake and the settler."""
        self.intake.close()
        self._give_back_waiting('not started: the worker stopped')
        self._take_late_arrivals()
        self.gatherer.flush(everything=True)
        self.consumer.give_up_at = self.clock.monotonic() + SHUTDOWN_SETTLE_SEC
        assert self.settler is not None
        self.settler.close()
        self.heartbeat.close()
        self.report_settled()
        self.shutdown()

    # --- helpers ----------------------------------------------------------------------------

    def _still_running(self) -> bool:
        """(Stopping.) Give back what it no longer waits for; whether a run
        it waits for is still going (a stuck one is not waited for)."""
        for job, reason in self.stopping.left_behind(self.running):
            self._free(job)
            self._give_back(job, reason)
        return any(not job.stuck for job in self.running)

    def _take_late_arrivals(self) -> None:
        """Release batches that arrived while the worker was stopping."""
        while True:
            try:
                kind, value = self.events.get_nowait()
            except queue.Empty:
                return
            if kind == 'arrival':
                batch = self.intake.arrived(value)
                if batch is not None:
                    self.settle(batch)
            elif kind == 'done':
                self.finished(value)

