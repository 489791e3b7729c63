"""Exponential backoff for SQS outages and throttling."""
from __future__ import annotations

import random
from typing import Optional

#: One generator for every Backoff (seeding one costs a system call, and
#: settling makes a Backoff per request).
_shared_rng = random.Random()


class Backoff:
    """Delays that double from ``initial`` up to ``maximum`` seconds, with a
    little jitter so a fleet of workers does not retry in step."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0,
                 rng: Optional[random.Random] = None):
        self.initial = initial
        self.maximum = max(maximum, initial)
        self.failures = 0
        self._rng = rng or _shared_rng

    def next_delay(self) -> float:
        """The pause before the next attempt (and count one more failure)."""
        delay = min(self.initial * 2 ** min(self.failures, 30), self.maximum)
        self.failures += 1
        return delay * self._rng.uniform(0.8, 1.0)

    def reset(self) -> None:
        """The last attempt worked: start again from ``initial``."""
        self.failures = 0
