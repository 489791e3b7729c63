"""Time, read through one object: the clock a worker and its parts are given (the
system's by default; a test passes one it moves itself,
``tests/support/clock.FakeClock``, instead of waiting for real time)."""
from __future__ import annotations

import time as _time
from typing import Protocol


class Clock(Protocol):
    """What reads or waits for time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, deadlines)."""

    def time(self) -> float:
        """Epoch seconds (what is logged, stored or shown)."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class SystemClock:
    """The machine's clocks."""

    monotonic = staticmethod(_time.monotonic)
    time = staticmethod(_time.time)
    sleep = staticmethod(_time.sleep)


#: The clock everything uses unless given another.
SYSTEM_CLOCK: Clock = SystemClock()
