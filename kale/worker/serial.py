"""The serial pool's own steps: what waits runs here, one task after another,
on the worker's own thread (docs/explanation/internals-worker.md, "The serial pool").
"""
from __future__ import annotations

import logging
import math
import queue
from typing import Optional

from kale.events import HOLDS_GROUP, Settlement
from kale.queue_config import TaskQueue
from kale.worker.batch import SETTLE_MARGIN_SEC, Batch
from kale.worker.holding import Holding
from kale.worker.intake import READ_AHEAD_BATCHES
from kale.worker.jobs import Job, lost_run
from kale.worker.limits import TaskStuck

logger = logging.getLogger('kale.worker')

#: The serial pool settles what ended of a batch that runs longer than this
#: in parts, so that what ended is deleted, logged and counted sooner.
SETTLE_PARTS_AFTER_SEC = 1.0


class SerialRuns(Holding):
    """The serial pool's steps of :class:`~kale.worker.loop.Worker`."""

    #: No batch waiting ends before this (so a run ending earlier dooms none):
    #: 0 when batches joined what waits since it was worked out.
    doomed_from = 0.0
    #: No batch that arrived and waits to be taken in ends before this, while
    #: ``events_seen`` events wait (taking events in sets it back).
    arrivals_from = 0.0
    events_seen = 0

    def _run_in_order(self) -> None:
        """Run what waits, one after another, here; what ended is settled as due
        meanwhile, each queue's run times told to the prefetch as its turn ends."""
        prefetch = self.prefetch
        assert prefetch is not None
        part_at = self.clock.monotonic() + SETTLE_PARTS_AFTER_SEC
        ran, ran_sec = 0, 0.0
        ran_queue: Optional[TaskQueue] = None
        while self.waiting and not self._stopping:
            job = self.waiting.pop(0)
            now = self.clock.monotonic()
            if now >= part_at or job.long:
                part_at = now + SETTLE_PARTS_AFTER_SEC      # (a long task runs alone)
                self._settle_part(job.batch)    # what ended so far, while the rest runs
            duration = self._run_here(job, now)
            if duration:
                queue = job.batch.queue
                if queue is not ran_queue:
                    if ran_queue is not None:
                        prefetch.ran(ran_queue, ran_sec / ran)
                    ran, ran_sec, ran_queue = 0, 0.0, queue
                ran += 1
                ran_sec += duration
        if ran_queue is not None:
            prefetch.ran(ran_queue, ran_sec / ran)
        self.gatherer.flush()
        self.runner.guard.after_batch()     # its timer stopped while none runs

    def _settle_part(self, batch: Batch) -> None:
        """Settle and report what of the batch is decided, while the rest runs."""
        part = batch.split_decided()
        if part is not None:
            self.gatherer.add(part)
            self.gatherer.flush(everything=True)
            self.report_settled()

    def _flow_refuses(self, job: Job) -> Optional[Settlement]:
        """The settlement refusing the job's run by its flow limits, or None; the batch's
        later runs refused meanwhile are settled now (see :meth:`FlowGate.before_run`)."""
        batch = job.batch
        later = [other for other in self.waiting if other.batch is batch]
        assert self.prefetch is not None
        refused, others = self.flow.before_run(batch, job.received,
                                               [other.received for other in later],
                                               self.prefetch.mean_run_sec(batch.queue))
        if others:
            by_message = {id(settlement.received): settlement for settlement in others}
            for other in later:
                settlement = by_message.get(id(other.received))
                if settlement is not None:
                    self.waiting.remove(other)
                    self._settle_unrun(other, settlement)
        return refused

    def long_last(self, batch: Batch, jobs: list[Job]) -> list[Job]:
        """The batch's jobs in the order they run: a long task runs alone, after the
        rest, under the heartbeat; its batch's other long tasks (and on a FIFO
        queue, its group's later messages) are given back, to run alone later."""
        chosen: Optional[Job] = None
        order = []
        for job in jobs:
            if chosen is not None and batch.fifo and job.group == chosen.group:
                self._give_back(job, 'an earlier task of group %r runs alone first'
                                     % job.received.group_id)
            elif not batch.is_long(job.task_class.time_limit):
                order.append(job)
            elif chosen is None:
                chosen = job
                job.long = True
            else:
                self._give_back(job, 'time_limit %gs is longer than the visibility timeout: '
                                     'waits to run alone' % job.task_class.time_limit)
        return order if chosen is None else order + [chosen]

    def _run_here(self, job: Job, now: float) -> float:
        """Run the job's task here if it may still start; its run time (0.0: not run, or stuck)."""
        batch = job.batch
        limited = self.flow.limits(job.task_class)
        if limited or batch.blind or job.long or not batch.fits(job.task_class.time_limit, now):
            if not self._may_still_start(job, now, limited):
                return 0.0
        job.started = now
        until = self.intake.busy_until = now + job.task_class.time_limit
        waiting = self.waiting
        if (waiting and waiting[-1].batch is not batch) or not self.events.empty():
            self._busy(batch, until)        # (what waits is not just the rest of ``batch``)
        return self._run_inline(job, limited)

    def _may_still_start(self, job: Job, now: float, limited: bool) -> bool:
        """Whether a blind, long or limited job, or a late one, may start (else it is
        given back, or refused by its flow limits); a long one runs under the heartbeat."""
        batch = job.batch
        assert self.prefetch is not None
        window = self.prefetch.window_sec
        if batch.blind:
            if not batch.started_at:
                batch.started_at = now
            elif now - batch.started_at >= window:
                self._give_back(job, 'not started within %gs of its batch: given back for '
                                     'any worker to take' % window)
                return False
        if not self._fits(job, now, job.long):
            return False
        refused = self._flow_refuses(job) if limited else None
        if refused is not None:
            self._settle_unrun(job, refused)
            return False
        if job.long:
            self.heartbeat.keep(batch, job.received)
        return True

    def _run_inline(self, job: Job, limited: bool) -> float:
        """Run the job's task, then settle it as :meth:`finished` does a pool's; its run
        time (0.0: stuck, which leaves its message to SQS and stops the worker)."""
        self._in_task = job.claimed = True
        try:
            settlement = job.settlement = self.jobs.execute(job)
        except TaskStuck as stuck:          # back after its visibility timeout
            self.running.add(job)
            self.stuck_job(job, str(stuck))
            return 0.0
        except BaseException as exc:        # a job must always come back
            settlement = job.settlement = lost_run(job, exc)
            logger.exception('running %s failed', job)
        finally:
            self._in_task = False
            self.intake.busy_until = 0.0
        if job.long:
            self.heartbeat.stop(job.received)
        if self.suspects.jobs:
            self.suspects.discard(job)
        batch = job.batch
        settlements = batch.settlements     # (as _decided does)
        settlements.append(settlement)
        if len(settlements) == len(batch.messages):
            self.gatherer.add(batch)
        if job.group is not None and settlement.outcome in HOLDS_GROUP:
            self._hold_group(job.group, job.received.group_id)
        if self.memory_limit.exceeded():
            self.check_limits()
        return settlement.duration_sec

    def _busy(self, batch: Batch, until: float) -> None:
        """A run of ``batch`` that may last until ``until`` starts: what waits of other
        batches, or has arrived, and could not start by then is given back now."""
        self.intake.busy_until = until
        waiting, limit = self.waiting, until + SETTLE_MARGIN_SEC
        if waiting and waiting[-1].batch is not batch and limit >= self.doomed_from:
            self._give_back_doomed(batch, limit)
        events = self.events.qsize()
        if events and (events != self.events_seen or limit >= self.arrivals_from):
            self._give_back_arrivals(limit)

    def _give_back_arrivals(self, limit: float) -> None:
        """Give back the batches arrived whose budget ends before ``limit``; note
        the earliest end of the others, and how many events wait."""
        events, earliest = [], math.inf
        while True:
            try:
                events.append(self.events.get_nowait())
            except queue.Empty:
                break
        for kind, value in events:
            if kind == 'arrival' and value.batch is not None and value.batch.messages:
                deadline = value.batch.deadline
                if deadline < limit:
                    self.intake.give_back(value)
                elif deadline < earliest:
                    earliest = deadline
            self.events.put((kind, value))
        self.arrivals_from, self.events_seen = earliest, len(events)

    def _give_back_doomed(self, batch: Batch, limit: float) -> None:
        """Give back what waits of other batches whose budget ends before ``limit``;
        note the earliest end of what stays (a deadline only moves later)."""
        doomed, earliest = [], math.inf
        for job in self.waiting:
            deadline = job.batch.deadline
            if deadline < limit and job.batch is not batch:
                doomed.append(job)
            elif deadline < earliest:
                earliest = deadline
        self.doomed_from = earliest
        for job in doomed:
            self.waiting.remove(job)
            self._give_back(job, 'it could not start before its visibility timeout ends: '
                                 'given back for another worker to take')

    def _reads_ahead(self) -> bool:
        """Whether to receive the next batches while those waiting run: on a slow
        endpoint, when they would all start within the prefetch window."""
        ahead = self.intake.read_ahead = bool(self.waiting) and self.intake.reads_ahead() \
            and self.prefetch is not None and not self.suspects.jobs \
            and self.prefetch.may_read_ahead(self.waiting[-1].batch.queue, READ_AHEAD_BATCHES)
        return ahead
