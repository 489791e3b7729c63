"""Worker threads, and holding a run on one of them to its time limit
(docs/explanation/internals-worker.md, "Threads and their time limits").
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from kale.exceptions import ThreadTimeLimit, TimeLimitExceeded
from kale.worker.watchdog import Watchdog, Watched

logger = logging.getLogger(__name__)

T = TypeVar('T')

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc


def raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> bool:
    """Have thread ``thread_id`` raise ``exc_type`` at its next instruction."""
    return _set_async_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)) == 1


@dataclasses.dataclass(eq=False)
class GuardedRun:
    """One run on a worker thread, as the watchdog sees it."""

    thread_id: int
    seconds: float
    deadline: float                      # monotonic
    fired: bool = False                  # TimeLimitExceeded was sent
    stopped: bool = False                # the worker's stop was sent
    done: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def interrupt(self, exc_type: type[BaseException] = ThreadTimeLimit) -> bool:
        """Raise ``exc_type`` in the run's thread if the run is still going."""
        with self.lock:
            if self.done:
                return False
            if exc_type is ThreadTimeLimit:
                self.fired = True
            else:
                self.stopped = True
            return raise_in_thread(self.thread_id, exc_type)


class ThreadGuard:
    """A :class:`~kale.timeout.Guard` for worker threads, interrupted by ``watchdog``."""

    def __init__(self, watchdog: Watchdog, passes_through: tuple[type[BaseException], ...] = ()):
        self.watchdog = watchdog
        self.passes_through = passes_through
        self._active: set[GuardedRun] = set()

    def setup(self) -> None:
        pass

    def teardown(self) -> None:
        pass

    def after_batch(self) -> None:
        pass

    def stop_all(self, exc_type: type[BaseException]) -> None:
        """Raise ``exc_type`` in every run going on (the worker's stop)."""
        for run in list(self._active):
            run.interrupt(exc_type)

    def run(self, call: Callable[..., T], seconds: float, /, *args: Any, **kwargs: Any) -> T:
        run = GuardedRun(threading.get_ident(), seconds, time.monotonic() + seconds)
        owner = _RUN_OWNER.value
        watched = Watched(run.deadline, owner if owner is not None else 'a task', run.interrupt)
        self._active.add(run)
        self.watchdog.watch(watched)
        try:
            try:
                result = call(*args, **kwargs)
            finally:
                with run.lock:          # (one lock: see the docs page)
                    run.done = True
                    if run.fired or run.stopped:
                        _set_async_exc(ctypes.c_ulong(run.thread_id), None)     # taken back
        except BaseException as exc:
            if isinstance(exc, self.passes_through):
                raise
            if run.fired:
                raise TimeLimitExceeded(seconds) from (
                    None if isinstance(exc, ThreadTimeLimit) else exc)
            raise
        finally:
            self.watchdog.unwatch(watched)
            self._active.discard(run)
        if run.fired:       # it swallowed every interruption and ended on its own
            raise TimeLimitExceeded(seconds)
        return result


class _Owner(threading.local):
    value: Any = None


#: What the runs on this thread are for (the worker's job), for the watchdog.
_RUN_OWNER = _Owner()


def run_for(owner: Any) -> None:
    """Name what the runs this thread makes from now on are for (``str(owner)``
    labels them in the watchdog's log lines)."""
    _RUN_OWNER.value = owner


class Threads:
    """Up to ``limit`` daemon threads running submitted calls, started as needed."""

    def __init__(self, limit: int, name: str = 'kale-task'):
        self.limit = limit
        self.name = name
        self._calls: 'queue.SimpleQueue[Optional[Callable[[], Any]]]' = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], Any]) -> None:
        """Run ``call()`` on a thread (a new one if none is idle and the
        limit allows; else it waits for one). ``call`` handles its own errors."""
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self.limit:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name='%s-%d' % (self.name, len(self._threads) + 1))
                self._threads.append(thread)
                thread.start()
        self._calls.put(call)

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            try:
                call()
            except BaseException:       # a stray exception must not end the thread
                logger.exception('a worker thread\'s call failed')
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        """Let idle threads end (a stuck one is left: it is a daemon)."""
        for _ in self._threads:
            self._calls.put(None)
