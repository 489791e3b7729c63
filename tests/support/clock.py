"""A clock that moves only when a test moves it."""
from __future__ import annotations

import time


class FakeClock:
    """Monotonic seconds that stand still until :meth:`advance`; ``sleep``
    advances. Also a :class:`kale.clock.Clock` (``monotonic``, ``time``,
    ``sleep``) and, called, the monotonic time (for parts that take a
    function)."""

    #: Epoch seconds when the monotonic clock reads 0.
    EPOCH = 1_790_000_000.0

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.EPOCH + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


class NoSleepClock:
    """The machine's clocks, except that ``sleep`` returns at once and is
    recorded in ``slept``: for parts whose pauses a test counts rather than
    waits out, on batches received on the real clock."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class ShiftedClock:
    """The machine's clocks moved ahead by ``offset`` seconds (time passing
    for one part alone, such as the transport's messages' visibility)."""

    def __init__(self, offset: float = 0.0):
        self.offset = offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def time(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
