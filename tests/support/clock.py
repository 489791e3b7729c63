"""A clock that moves only when a test moves it."""
from __future__ import annotations


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
