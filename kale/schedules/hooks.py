"""``kale worker --scheduler``: the scheduler on a thread of the worker,
started and stopped with it."""
from __future__ import annotations

import threading
from typing import Any, Optional

from kale.clock import SYSTEM_CLOCK
from kale.hooks import WorkerHooks
from kale.schedules.scheduler import Scheduler, make_scheduler


class SchedulerHooks(WorkerHooks):
    """Runs a scheduler beside the worker (one with no records or no
    schedules does not start, saying why in one line)."""

    def __init__(self) -> None:
        self.scheduler: Optional[Scheduler] = None
        self._thread: Optional[threading.Thread] = None

    def on_worker_startup(self, worker: Any) -> None:
        self.scheduler = make_scheduler(worker.app, clock=getattr(worker, 'clock', SYSTEM_CLOCK))
        self._thread = threading.Thread(target=self.scheduler.run, name='kale-scheduler',
                                        daemon=True)
        self._thread.start()

    def on_worker_shutdown(self, worker: Any) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
        if self._thread is not None:
            self._thread.join(10)
        self.scheduler = self._thread = None
