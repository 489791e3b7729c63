"""What a worker does when a request to SQS fails: log, back off, try again.

Every step of the loop that talks to SQS reports here: :meth:`Outage.reached`
after a request that worked, :meth:`Outage.failed` after one that did not. A
failure is logged and followed by a pause (0.5 s doubling up to
``SQS_ERROR_MAX_BACKOFF_SEC``); the pauses start again from the shortest once
a request works. A burst worker that has not reached SQS for
``BURST_GIVE_UP_SEC`` gives up instead, raising a non-retryable SQSError.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import SQSError
from kale.retry import Backoff

logger = logging.getLogger('kale.worker')


class Outage:
    """Back-off state of one worker's requests to SQS."""

    def __init__(self, who: str, max_backoff_sec: float, give_up_after_sec: Optional[float],
                 sleep: Callable[[float], None], clock: Clock = SYSTEM_CLOCK):
        self.who = who
        self.backoff = Backoff(maximum=max_backoff_sec)
        #: A burst worker's BURST_GIVE_UP_SEC (None: never give up).
        self.give_up_after_sec = give_up_after_sec
        self.sleep = sleep
        self.clock = clock
        self._failing_since: Optional[float] = None

    def reached(self) -> None:
        """A request worked: back-offs start again from the shortest pause."""
        self.backoff.reset()
        self._failing_since = None

    def failed(self, what: str, exc: SQSError) -> None:
        """Log a failed request and pause before the next (or give up, see above).
        The pause counts toward the give-up time, so a burst worker gives up
        within one pause of BURST_GIVE_UP_SEC."""
        now = self.clock.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        delay = self.backoff.next_delay()
        if self.give_up_after_sec is not None:
            failing = now - self._failing_since
            if failing >= self.give_up_after_sec:
                raise SQSError('burst worker gave up after %.0f s without reaching SQS '
                               '(BURST_GIVE_UP_SEC): %s failed: %s'
                               % (failing, what, exc), exc.code, retryable=False)
            delay = min(delay, self.give_up_after_sec - failing)
        log = logger.warning if exc.retryable else logger.error
        log('%s: %s failed, retrying in %.1fs: %s', self.who, what, delay, exc)
        self.sleep(delay)
