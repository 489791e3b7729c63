"""What a worker holds: the messages waiting to start (``waiting``, in order)
and the tasks running (``running``), each a :class:`~kale.worker.jobs.Job`,
and how a message it will not run is given back (see :mod:`kale.worker.loop`
for the rules: budgets, FIFO groups, the suspects' cap).
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Optional

from kale.events import Settlement
from kale.worker.base import WorkerBase
from kale.worker.caps import SuspectCaps
from kale.worker.gather import Gatherer
from kale.worker.heartbeat import extension_lead
from kale.worker.jobs import Job
from kale.worker.suspects import release

if TYPE_CHECKING:
    import queue
    from typing import Any

    from kale.worker.intake import Intake
    from kale.worker.jobs import JobRunner
    from kale.worker.prefetch import Prefetch


class Holding(WorkerBase):
    """The worker's holdings; its parts are built by :class:`~kale.worker.loop.Worker`."""

    inline: bool
    waiting: list[Job]
    running: set[Job]
    suspects: SuspectCaps
    gatherer: Gatherer
    intake: 'Intake'
    jobs: 'JobRunner'
    prefetch: 'Optional[Prefetch]'
    events: 'queue.SimpleQueue[tuple[str, Any]]'
    _groups: set[tuple[str, str]]
    _per_class: collections.Counter[type]

    def _within_cap(self, now: float) -> bool:
        """Whether what waits may start with the suspects held: what waits beyond
        their cap is given back first, and SQS must have taken it back."""
        suspects, running = self.suspects, len(self.running)
        self.waiting, extra = suspects.over([job for job in self.waiting if self._fits(job, now)],
                                            running)
        self._give_back_extra(extra)
        # (an idle long poll still out is not waited for: what it brings is given back)
        asked = self.intake.asked if self.intake.receiving else 0
        if suspects.jobs and running + len(self.waiting) + asked > suspects.cap:
            return False                # once enough of what runs has ended
        if self.gatherer or (self.settler is not None and self.settler.settling()):
            self._settle_now()          # what ended is held until SQS has settled it
        if suspects.taken_back(self._settle_now):
            return True
        # SQS refused some: still held, so what waits goes too
        suspects.given_back += self._give_back_waiting(
            'given back: others could not be, a suspect may not run now')
        return False

    def _give_back_extra(self, extra: list[tuple[Job, str]]) -> None:
        """Give back what waits beyond the suspects' cap, each for its reason."""
        for job, reason in extra:
            self.suspects.given_back.append(self._give_back(job, reason))
        if self.inline:                 # (its jobs' batches settle whole: these go now)
            for batch in {id(job.batch): job.batch for job, _ in extra}.values():
                part = batch.split_decided()
                if part is not None:
                    self.gatherer.add(part)

    def _give_back_waiting(self, reason: str) -> list[Settlement]:
        """Give back everything that waits; the settlements."""
        given_back = [self._give_back(job, reason) for job in self.waiting]
        self.waiting = []
        return given_back

    def _settle_now(self) -> None:
        """Settle what was decided, and wait until it is."""
        self.gatherer.flush(everything=True)
        assert self.settler is not None
        self.settler.flush()

    def _free(self, job: Job) -> None:
        """Free the place, group and watch of a job whose task ended."""
        self.running.discard(job)
        if self.suspects.jobs:
            self.suspects.discard(job)
        if job.group is not None:
            self._groups.discard(job.group)
        self._per_class[job.task_class] -= 1
        if job.long:
            self.heartbeat.stop(job.received)

    def stuck_job(self, job: Job, what: str = '') -> None:
        """A task did not come back from its time limit: the worker stops (see :meth:`stuck`)."""
        job.stuck = True
        self.stuck(what or str(job))

    def _fits(self, job: Job, now: float, long: Optional[bool] = None) -> bool:
        """Whether the job may still start (``long``: whether it may outlast its
        budget, when known); one that may not is given back."""
        time_limit = job.task_class.time_limit
        batch = job.batch
        if batch.is_long(time_limit) if long is None else long:
            # the heartbeat keeps it: it needs time to start it
            if batch.time_left(now) > extension_lead(batch.queue.visibility_timeout_sec):
                return True
        elif batch.fits(time_limit, now):
            return True
        self._give_back(job, 'time_limit %gs does not fit the %.1fs left of its visibility '
                             'timeout' % (time_limit, batch.time_left(now)))
        return False

    def _give_back(self, job: Job, reason: str) -> Settlement:
        return self._settle_unrun(job, release(job.batch, job.received, reason))

    def _settle_unrun(self, job: Job, settlement: Settlement) -> Settlement:
        """Settle a job that will not run (released: its group's later ones too)."""
        self.suspects.discard(job)
        self._decided(job, settlement)
        if job.group is not None:
            self._hold_group(job.group, job.received.group_id)
        return settlement

    def _hold_group(self, group: tuple[str, str], group_id: Optional[str]) -> None:
        """A FIFO message of ``group`` went back to SQS: so do its group's later
        messages waiting here, to keep the group in order."""
        later = [job for job in self.waiting if job.group == group]
        if not later:
            return
        self.waiting = [job for job in self.waiting if job.group != group]
        for job in later:
            self._decided(job, release(job.batch, job.received,
                                       'an earlier task of group %r has not completed' % group_id))

    def _decided(self, job: Job, settlement: Settlement) -> None:
        """The job's message is settled so, soon: a pool's with others that end close
        together; the serial pool's with the rest of its batch (or in parts)."""
        batch = job.batch
        batch.settlements.append(settlement)
        if not self.inline or len(batch.settlements) == len(batch.messages):
            self.gatherer.add(batch)
