"""Per-task time limits as swappable context managers.

``with SignalTimeout(2.5): run()`` raises :class:`TimeLimitExceeded` inside
``run`` once 2.5 s have passed. The default uses SIGALRM through
``setitimer``, so limits may be fractions of a second; it must run in the
main thread. A task that catches the exception and carries on is interrupted
again every ``repeat_sec``, and a run that outlives its limit counts as timed
out even if it swallowed every interruption.

Swap the mechanism by setting ``Worker.timeout_class`` (or the
``TASK_TIMEOUT_CLASS`` setting) to another class with the same constructor.
"""
from __future__ import annotations

import signal
import time
from types import FrameType, TracebackType
from typing import Any, Optional

from kale.exceptions import TimeLimitExceeded


class BaseTimeout:
    """A context manager enforcing ``seconds`` on the code it wraps."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.started = 0.0
        self.fired = False

    def __enter__(self) -> 'BaseTimeout':
        self.started = time.monotonic()
        self.arm()
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.disarm()
        if exc_type is None and self.fired:
            raise TimeLimitExceeded(self.seconds)

    def arm(self) -> None:
        raise NotImplementedError

    def disarm(self) -> None:
        raise NotImplementedError


class SignalTimeout(BaseTimeout):
    """SIGALRM with sub-second precision (POSIX, main thread only)."""

    repeat_sec = 0.25

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self._previous: Any = None
        self._armed = False

    def _on_alarm(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self._armed:
            return          # an alarm that was already on its way when the run ended
        self.fired = True
        raise TimeLimitExceeded(self.seconds)

    def arm(self) -> None:
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self._armed = True
        signal.setitimer(signal.ITIMER_REAL, max(self.seconds, 0.001), self.repeat_sec)

    def disarm(self) -> None:
        """Stop the alarm (safe to call twice, and from a ``finally``)."""
        self._armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self._previous is not None:
            signal.signal(signal.SIGALRM, self._previous)
            self._previous = None


class NoTimeout(BaseTimeout):
    """Enforces nothing (for debugging a task under a debugger)."""

    def arm(self) -> None:
        pass

    def disarm(self) -> None:
        pass
