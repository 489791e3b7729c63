"""The token bucket's arithmetic, kept apart from where the bucket is stored.

A bucket holds ``tokens`` at ``updated_at`` (epoch seconds). It refills at
the rate, up to its capacity; a run takes one whole token. A run refused
(no whole token there) reserves the next one all the same: the bucket goes
below zero by one token per reservation, and the refused run is told to
come back once its token has been refilled, so that the refused runs of a
key come back one after the other at the rate, each once, and run then
without asking the bucket again (the reservation is kept with the run's
task id, see :mod:`kale.flow.state`).
"""
from __future__ import annotations

import dataclasses
import math

from kale.flow.spec import Rate

#: Longest delay a refused message is sent back with (SQS's limit); a run
#: whose token is further away than that reserves nothing and asks again.
MAX_DELAY_SEC = 900
#: Shortest one (a delay of 0 would be received again at once).
MIN_DELAY_SEC = 1


@dataclasses.dataclass
class Bucket:
    """A bucket's stored state (a new one is full)."""

    tokens: float
    updated_at: float

    def refill(self, rate: Rate, now: float) -> None:
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(rate.capacity, self.tokens + elapsed * rate.per_sec)
        self.updated_at = max(self.updated_at, now)

    def take(self, rate: Rate, now: float) -> tuple[float, bool]:
        """Take a token: ``(0.0, False)`` when taken; else the whole seconds
        (MIN_DELAY_SEC to MAX_DELAY_SEC) until the token reserved for this
        run is there, and whether one was reserved (not when it would be
        further away than MAX_DELAY_SEC)."""
        self.refill(rate, now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0, False
        wait = (1.0 - self.tokens) / rate.per_sec       # until this run's token is whole
        if wait > MAX_DELAY_SEC:
            return float(MAX_DELAY_SEC), False
        self.tokens -= 1.0
        return float(max(MIN_DELAY_SEC, math.ceil(wait))), True
