"""The cap that the suspects a worker with a pool holds put on what it holds
(docs/explanation/internals-worker.md, "The suspects' cap").
"""
from __future__ import annotations

from typing import Callable

from kale.events import Settlement
from kale.worker.batch import Batch
from kale.worker.jobs import Job
from kale.worker.suspects import LAST_RECEIVE, Suspect, log_suspects, most_bound

#: A cap above any: what a message that is no suspect sorts by.
UNBOUND = 1 << 30


class SuspectCaps:
    """The suspects a worker holds (waiting or running), and their cap."""

    def __init__(self, who: str):
        self.who = who
        #: The jobs of the suspects held, each with its suspect (a plain job
        #: carries nothing: a task that is no suspect pays nothing for this).
        self.jobs: dict[Job, Suspect] = {}
        #: What was given back for them: settled before one of them starts.
        self.given_back: list[Settlement] = []
        #: The smallest cap of the last batch that brought suspects (0: the
        #: last batch brought none): while batches bring suspects, the worker
        #: asks for no more than that, rather than give most of it back.
        self.recent = 0

    def room(self) -> int:
        """The most messages the worker may hold, ask for included: the cap
        of the suspects it holds, and that of the last batch that brought some."""
        cap = self.cap if self.jobs else UNBOUND
        return min(cap, self.recent) if self.recent else cap

    @property
    def cap(self) -> int:
        """The most messages the worker may hold now (only while it holds a suspect)."""
        return min(suspect.cap for suspect in self.jobs.values())

    def hold(self, batch: Batch, jobs: list[Job], suspects: list[Suspect]) -> None:
        """Keep the jobs of the batch's suspects, each with its suspect."""
        by_message = {id(suspect.received): suspect for suspect in suspects}
        for job in jobs:
            suspect = by_message.get(id(job.received))
            if suspect is not None:
                self.jobs[job] = suspect
        # (one on its last receive goes back at once: it bounds nothing)
        self.recent = min((suspect.cap for suspect in suspects if not suspect.last), default=0)
        log_suspects(self.who, batch, suspects, self.recent or 1)

    def discard(self, job: Job) -> None:
        """A job ended or was given back: it holds no cap any longer."""
        self.jobs.pop(job, None)

    def taken_back(self, settle_now: Callable[[], None]) -> bool:
        """Whether SQS took back what was given back for them (``settle_now``
        settles it first, and waits; none to wait for once none is held);
        forgotten either way."""
        given_back, self.given_back = self.given_back, []
        if not given_back or not self.jobs:
            return True
        settle_now()
        return all(s.settled or s.lapsed for s in given_back)

    def over(self, waiting: list[Job], running: int) -> tuple[list[Job], list[tuple[Job, str]]]:
        """What waits, split into what may stay within the cap and what is given back (why)."""
        jobs = self.jobs
        back = [job for job in waiting if job in jobs and jobs[job].last]
        waiting = [job for job in waiting if job not in back]
        cap = min((suspect.cap for job, suspect in jobs.items() if job not in back),
                  default=UNBOUND)
        kept, beyond = self._within(waiting, running, cap)
        return kept, [(job, LAST_RECEIVE) for job in back] + beyond

    def _within(self, waiting: list[Job], running: int,
                cap: int) -> tuple[list[Job], list[tuple[Job, str]]]:
        """What waits, split into what stays within ``cap`` and what goes (the suspects stay first)."""
        if running + len(waiting) <= cap:
            return waiting, []
        ordered = sorted(waiting, key=self._order)
        keep = max(cap - running, 1)
        return ordered[:keep], [
            (job, 'given back: a suspect runs with at most %d message(s) held' % cap)
            for job in ordered[keep:]]

    def _order(self, job: Job) -> tuple[bool, int, int, int]:
        """How what waits sorts when some must go: the most bound suspects first."""
        suspect = self.jobs.get(job)
        return most_bound(suspect) if suspect is not None else (True, UNBOUND, 0, 0)
