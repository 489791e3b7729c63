"""A worker whose settling is slow or blocked: what it received is neither
left to lapse nor judged by the bookkeeping that waits for the settle
(in-process, memory transport)."""
from __future__ import annotations

import threading
import time

import pytest

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


def first_deletes_hang(broker, count: int, seconds: float) -> None:
    """The first ``count`` delete requests take ``seconds`` (answers lost
    until a read timeout); the rest are quick."""
    real = broker.transport.delete_batch
    hung = []
    lock = threading.Lock()

    def delete_batch(*args, **kwargs):
        with lock:
            hang = len(hung) < count
            hung.append(hang)
        if hang:
            time.sleep(seconds)
        return real(*args, **kwargs)
    broker.transport.delete_batch = delete_batch


class FirstStarts(WorkerHooks):
    """The receive count of each task's first start."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def on_task_started(self, queue, received, message):
        self.counts.setdefault(message.task_id, received.receive_count)


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_hung_settling_leaves_no_received_message_to_lapse_unrun(memory_broker, pool):
    """The first deletes hang for longer than the queue's 4-second visibility
    timeout. The worker goes on starting what it received, and receives no
    more than it can start while settling is behind: every task starts on
    its first delivery (a worker blocked handing its settles over let what it
    had received lapse unrun, and SQS delivered it again)."""
    published = pool_tasks.ShortSpanTask.publish_batch(None, [((0,), {}) for _ in range(300)])
    first_deletes_hang(memory_broker, 4, 6.0)
    starts = FirstStarts()
    worker = Worker(queue_names=['short'], broker=memory_broker, pool=pool, burst=True,
                    hooks=[starts])
    assert worker.run() == EXIT_OK
    assert sorted(starts.counts) == sorted(published)
    lapsed = sorted(task_id for task_id, count in starts.counts.items() if count > 1)
    assert lapsed == [], '%d tasks first started on a later delivery' % len(lapsed)
