"""Shutdown signals: the first SIGTERM or SIGINT lets the running task
finish; a second, at least :data:`SECOND_SIGNAL_MIN_GAP_SEC` later, stops it
too (by raising :class:`WorkerInterrupt` inside it)."""
from __future__ import annotations

import logging
import signal
import time
from types import FrameType
from typing import Any, Callable, Optional

logger = logging.getLogger('kale.worker')

#: A second shutdown signal stops the running task only when it comes at
#: least this long after the first: one stop request delivered twice at once
#: (to the process group and by a supervisor) is still a graceful stop.
SECOND_SIGNAL_MIN_GAP_SEC = 0.5

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class WorkerInterrupt(BaseException):
    """Raised inside a running task to stop it now (a second shutdown signal); a
    BaseException, so a task's ``except Exception`` cannot swallow it."""


class StopSignals:
    """Installs the handlers; ``on_stop`` is called on every counted signal,
    and ``in_task()`` says whether a second one should interrupt."""

    def __init__(self, name: str, on_stop: Callable[[], None], in_task: Callable[[], bool]):
        self.name = name
        self.on_stop = on_stop
        self.in_task = in_task
        self.count = 0
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        self._previous = {signum: signal.signal(signum, self.handle) for signum in SIGNALS}

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def handle(self, signum: int, frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self.count and now - self._first_at < SECOND_SIGNAL_MIN_GAP_SEC:
            return
        self.count += 1
        self.on_stop()
        if self.count == 1:
            self._first_at = now
            logger.info('%s: %s received; finishing the running task, then stopping '
                        '(send it again to stop at once)', self.name, name)
        else:
            logger.info('%s: second %s received; stopping the running task', self.name, name)
            if self.in_task():
                raise WorkerInterrupt()
