"""A worker whose settling is slow or blocked: what it received is neither
left to lapse nor judged by the bookkeeping that waits for the settle
(in-process, memory transport)."""
from __future__ import annotations

import time

from kale.conf import settings
from kale.hooks import WorkerHooks
from kale.worker import EXIT_OK, Worker
from tests import pool_tasks
from tests.support.records import recorded_ids

#: How long the first settle holds the worker's main thread: past the quick
#: task's time limit and the stuck grace.
HELD_SEC = 2.0


class HoldFirstSettle(WorkerHooks):
    """The first settle holds the worker's main thread (a slow endpoint, a
    hook that waits)."""

    def __init__(self):
        self.held = False

    def before_settle(self, queue, batch):
        if not self.held:
            self.held = True
            time.sleep(HELD_SEC)


def test_a_coroutine_that_ended_while_the_main_thread_was_held_is_not_stuck(memory_broker,
                                                                           record):
    """The quick coroutine ends while the main thread settles the first task;
    the watchdog judges its run, which ended, not the main thread's handling
    of its end (it used to count it stuck, and the worker exited EXIT_STUCK)."""
    first = pool_tasks.AsyncRecordTask.publish(None)
    quick = pool_tasks.AsyncQuickTask.publish(None)
    with settings.override(WORKER_STUCK_GRACE_SEC=0.5):
        worker = Worker(queue_names=['default'], broker=memory_broker, pool='asyncio',
                        burst=True, hooks=[HoldFirstSettle()])
        assert worker.run() == EXIT_OK
    assert sorted(recorded_ids(record, 'ran')) == sorted([first, quick])
    assert worker.stats == {'succeeded': 2}
