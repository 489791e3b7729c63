"""The token bucket's arithmetic, kept apart from where the bucket is stored
(tokens taken at the start, places in line: docs/explanation/internals-workflow.md, "The token bucket")."""
from __future__ import annotations

import dataclasses
import math

from kale.flow.spec import Rate

#: Longest delay a refused message is sent back with (SQS's limit); a run
#: whose token is further away than that reserves nothing and asks again.
MAX_DELAY_SEC = 900
#: Shortest one (a delay of 0 would be received again at once).
MIN_DELAY_SEC = 1


def most_starts(rate: Rate, seconds: float) -> float:
    """The most runs of one key that can start in any ``seconds``: the
    bucket's burst, and the rate over the window."""
    return rate.capacity + rate.per_sec * seconds


@dataclasses.dataclass
class Bucket:
    """A bucket's stored state (a new one is full), and the places reserved in it."""

    tokens: float
    updated_at: float
    reserved: int = 0
    #: Places moved to the end of the line at ``updated_at``.
    _moved: int = dataclasses.field(default=0, repr=False, compare=False)

    def refill(self, rate: Rate, now: float) -> None:
        if now > self.updated_at:
            self._moved = 0
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(max(self.tokens, rate.capacity), self.tokens + elapsed * rate.per_sec)
        self.updated_at = max(self.updated_at, now)

    def take(self, rate: Rate, now: float) -> tuple[float, bool]:
        """A new run takes a token (one beyond the places reserved, or any when
        the bucket is full): ``(0.0, False)``; else the whole seconds
        (MIN_DELAY_SEC to MAX_DELAY_SEC) until its token will be there behind
        the places reserved, and whether a place was reserved (not past MAX_DELAY_SEC)."""
        self.refill(rate, now)
        if self.tokens - self.reserved >= 1.0 or self.tokens >= rate.capacity:
            self.tokens -= 1.0
            return 0.0, False
        wait = (self.reserved + 1.0 - self.tokens) / rate.per_sec
        if wait > MAX_DELAY_SEC:
            return float(MAX_DELAY_SEC), False
        self.reserved += 1
        return _whole(wait), True

    def take_reserved(self, rate: Rate, now: float) -> float:
        """A run back on its reservation takes a token ahead of the new runs:
        0.0 (its place used). Else, late behind others (or early), it moves to
        the end of the line: the whole seconds until the tokens of the places
        before it are there (at most MAX_DELAY_SEC); several moved at one time
        take the last places one after the other, not to come back together."""
        self.refill(rate, now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.reserved = max(0, self.reserved - 1)
            return 0.0
        wait = (max(1, self.reserved - self._moved) - self.tokens) / rate.per_sec
        self._moved += 1
        return min(float(MAX_DELAY_SEC), _whole(wait))


def _whole(wait: float) -> float:
    return float(max(MIN_DELAY_SEC, math.ceil(wait - 1e-9)))
