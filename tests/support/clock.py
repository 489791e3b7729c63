"""A clock that moves only when a test moves it."""
from __future__ import annotations


class FakeClock:
    """Monotonic seconds that stand still until :meth:`advance`; ``sleep`` advances."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)
