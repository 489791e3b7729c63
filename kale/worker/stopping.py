"""What a worker with a pool stops waiting for when it stops: runs never begun, and
after a second signal's grace every run (docs/explanation/internals-worker.md,
"Stopping, limits and exit codes").
"""
from __future__ import annotations

import logging
from typing import Iterable, Optional

from kale.clock import Clock
from kale.worker.jobs import Job, JobRunner

logger = logging.getLogger('kale.worker')

#: After a second shutdown signal, how long the runs it interrupted have to
#: come back before the worker gives up on them and exits.
GIVE_UP_SEC = 2.0
#: How often a stopping worker says which runs it still waits for.
SAY_WAITING_EVERY_SEC = 10.0


class Stopping:
    """The jobs a stopping worker no longer waits for (see the docs page)."""

    def __init__(self, name: str, jobs: JobRunner, clock: Clock):
        self.name = name
        self.jobs = jobs
        self.clock = clock
        self.give_up_at: Optional[float] = None
        self._say_at: Optional[float] = None

    def second_signal(self) -> None:
        """The runs were interrupted: give up on them after GIVE_UP_SEC."""
        if self.give_up_at is None:
            self.give_up_at = self.clock.monotonic() + GIVE_UP_SEC

    def left_behind(self, running: Iterable[Job]) -> list[tuple[Job, str]]:
        """The running jobs not to wait for, each with the reason its message
        goes back: those whose run never began, and after a second signal's
        grace every one."""
        giving_up = self.give_up_at is not None and self.clock.monotonic() >= self.give_up_at
        left = []
        for job in list(running):
            if self.jobs.withdraw(job):
                logger.info('%s: %s given back: the worker stopped before its run began',
                            self.name, job)
                left.append((job, 'not started: the worker stopped'))
            elif giving_up:
                logger.warning('%s: gave up on %s: it did not end within %gs of the second '
                               'signal; its message is released', self.name, job, GIVE_UP_SEC)
                left.append((job, 'stopped: the worker gave up on it after a second signal'))
        self._say_waiting([job for job in running if not job.stuck and job not in
                           {gone for gone, _ in left}])
        return left

    def _say_waiting(self, waited_for: list[Job]) -> None:
        """Every SAY_WAITING_EVERY_SEC while stopping, name the runs waited for."""
        now = self.clock.monotonic()
        if self._say_at is None:
            self._say_at = now + SAY_WAITING_EVERY_SEC
        elif now >= self._say_at and waited_for:
            self._say_at = now + SAY_WAITING_EVERY_SEC
            logger.info('%s: stopping; still waiting for %d run(s): %s (send the signal again '
                        'to stop them)', self.name, len(waited_for),
                        ', '.join(str(job) for job in waited_for[:10]))
