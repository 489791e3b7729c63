"""The watchdog: one thread per worker that holds runs to their time limits
when no signal can, and notices runs that do not come back (docs/explanation/internals-worker.md,
"The watchdog").
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional

from kale.worker.aio import TaskLoop

logger = logging.getLogger('kale.worker')

#: Longest the watchdog sleeps between two looks at the event loop.
LOOK_SEC = 0.1
#: A loop that could not run its callbacks this long is logged as blocked.
BLOCKED_AFTER_SEC = 0.5


@dataclasses.dataclass(eq=False)
class Watched:
    """A run the watchdog holds to its limit: ``interrupt`` (None for a
    coroutine, cancelled on its own loop) is called at ``deadline`` and
    every ``repeat_sec`` after while the run goes on."""

    deadline: float                                  # monotonic
    #: What the run is for the worker (its job): handed to ``on_stuck``, and
    #: named by its ``str()`` in the log.
    owner: Any
    interrupt: Optional[Callable[[], object]] = None
    next_interrupt: float = 0.0
    stuck: bool = False


class Watchdog:
    """One thread holding every run of a worker to its limit (see the docs page)."""

    repeat_sec = 0.25

    def __init__(self, grace_sec: float, on_stuck: Callable[[Any], None],
                 blocked_after_sec: float = BLOCKED_AFTER_SEC):
        self.grace_sec = grace_sec
        self.on_stuck = on_stuck
        self.blocked_after_sec = blocked_after_sec
        self._runs: set[Watched] = set()
        self._loops: list[tuple[TaskLoop, Callable[[], str]]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._blocked_logged = False
        self._thread = threading.Thread(target=self._run, name='kale-watchdog', daemon=True)
        self._thread.start()

    def watch(self, run: Watched) -> None:
        with self._cond:
            run.next_interrupt = run.deadline
            self._runs.add(run)
            self._cond.notify()

    def watch_for(self, seconds: float, owner: Any) -> Watched:
        """Watch a run that starts now and is limited to ``seconds`` (a
        coroutine's: cancelled on its own loop, only watched here)."""
        run = Watched(time.monotonic() + seconds, owner)
        self.watch(run)
        return run

    def unwatch(self, run: Watched) -> None:
        with self._cond:
            self._runs.discard(run)

    def watch_loop(self, loop: TaskLoop, running: Callable[[], str]) -> None:
        """Log ``loop`` when it is blocked, naming ``running()``: what holds it."""
        with self._cond:
            self._loops.append((loop, running))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(2)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                wait = self._next_wait(time.monotonic())
                if wait > 0:
                    self._cond.wait(wait)
                if self._closed:
                    return
                due = list(self._runs)
            now = time.monotonic()
            for run in due:
                self._look(run, now)
            self._look_at_loops()

    def _next_wait(self, now: float) -> float:
        soonest = now + LOOK_SEC if self._loops else now + 3600.0
        for run in self._runs:
            if not run.stuck:
                soonest = min(soonest, run.next_interrupt if run.interrupt is not None
                              else run.deadline + self.grace_sec)
        return soonest - now

    def _look(self, run: Watched, now: float) -> None:
        if run.stuck or now < run.deadline:
            return
        if now >= run.deadline + self.grace_sec:
            run.stuck = True
            logger.error('%s is still running %.1fs after its time limit: the worker stops '
                         'taking tasks and exits for a fresh process (WORKER_STUCK_GRACE_SEC)',
                         run.owner, now - run.deadline)
            self.on_stuck(run.owner)
            return
        if run.interrupt is not None and now >= run.next_interrupt:
            run.interrupt()
            run.next_interrupt = now + self.repeat_sec

    def _look_at_loops(self) -> None:
        for loop, running in self._loops:
            blocked = loop.blocked_sec()
            if blocked >= self.blocked_after_sec and not self._blocked_logged:
                self._blocked_logged = True
                logger.warning('the event loop has been blocked for %.1fs by %s: a coroutine '
                               'is running without awaiting (a blocking call in async def?)',
                               blocked, running() or 'code outside any task')
            elif blocked < self.blocked_after_sec:
                self._blocked_logged = False
