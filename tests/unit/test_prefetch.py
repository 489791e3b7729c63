"""How many messages a worker receives: no more than it will start soon, so
sibling workers share a queue's work (see kale.worker.prefetch)."""
from __future__ import annotations

import dataclasses
import time

import pytest

from kale.exceptions import QueueConfigError
from kale.hooks import WorkerHooks
from kale.queue_config import TaskQueue, load_queue_config
from kale.worker import serial
from kale.worker.loop import Worker
from kale.worker.prefetch import Prefetch
from tests import tasks
from tests.support.records import read_records, recorded_ids

QUEUE = TaskQueue(name='q', priority=1, batch_size=10, visibility_timeout_sec=30,
                  long_poll_time_sec=0, num_iterations=5)


def test_a_queue_whose_tasks_it_has_not_seen_run_gets_a_whole_batch_blind():
    prefetch = Prefetch()
    assert prefetch.count(QUEUE) == QUEUE.batch_size and prefetch.blind(QUEUE)
    prefetch.ran(QUEUE, 0.5)
    assert prefetch.count(QUEUE) == 2 and not prefetch.blind(QUEUE)


def test_a_fixed_prefetch_is_never_blind():
    assert not Prefetch().blind(dataclasses.replace(QUEUE, prefetch=3))


@pytest.mark.parametrize('run_sec, count', [(0.001, 10), (0.1, 10), (0.4, 2), (0.9, 1), (2.0, 1)])
def test_the_count_is_what_starts_within_the_window(run_sec, count):
    prefetch = Prefetch(window_sec=1.0)
    prefetch.ran(QUEUE, run_sec)
    assert prefetch.count(QUEUE) == count


def test_the_count_follows_recent_run_times():
    prefetch = Prefetch(window_sec=1.0)
    prefetch.ran(QUEUE, 2.0)
    for _ in range(20):
        prefetch.ran(QUEUE, 0.01)
    assert prefetch.count(QUEUE) == 10
    assert prefetch.mean_run_sec(QUEUE) < 0.1


def test_a_fixed_prefetch_is_used_as_it_is():
    fixed = dataclasses.replace(QUEUE, prefetch=3)
    prefetch = Prefetch()
    assert prefetch.count(fixed) == 3
    prefetch.ran(fixed, 5.0)
    assert prefetch.count(fixed) == 3


def test_after_a_batch_with_long_tasks_receives_take_one_message_until_a_batch_size_of_them_had_none():
    prefetch = Prefetch()
    prefetch.ran(QUEUE, 0.0)
    prefetch.received(QUEUE, long_tasks=2)
    counts = []
    for _ in range(QUEUE.batch_size):
        counts.append(prefetch.count(QUEUE))
        prefetch.received(QUEUE, long_tasks=0)
    assert counts == [1] * QUEUE.batch_size
    assert prefetch.count(QUEUE) == QUEUE.batch_size


def test_read_ahead_only_while_everything_held_starts_within_the_window():
    prefetch = Prefetch(window_sec=1.0)
    assert not prefetch.may_read_ahead(QUEUE, 2)       # nothing seen yet
    prefetch.ran(QUEUE, 0.001)
    assert prefetch.may_read_ahead(QUEUE, 2)           # 30 tasks of 1 ms
    prefetch.ran(QUEUE, 0.5)
    assert not prefetch.may_read_ahead(QUEUE, 2)


@pytest.mark.parametrize('value, message', [
    (0, "field 'prefetch' must be 'auto' or an integer 1..10 (its batch_size), got 0"),
    (11, "got 11"), ('many', "got 'many'"), (True, 'got True')])
def test_a_bad_prefetch_is_a_one_line_error_naming_the_queue(tmp_path, value, message):
    path = tmp_path / 'queues.yaml'
    path.write_text('q:\n  priority: 1\n  batch_size: 10\n  visibility_timeout_sec: 30\n'
                    '  long_poll_time_sec: 0\n  num_iterations: 5\n  prefetch: %r\n' % (value,))
    with pytest.raises(QueueConfigError, match="q.*%s" % message.replace('(', r'\(')
                       .replace(')', r'\)')):
        load_queue_config(str(path))


def test_a_fixed_prefetch_is_read_from_the_queue_config(tmp_path):
    path = tmp_path / 'queues.yaml'
    path.write_text('q:\n  priority: 1\n  batch_size: 10\n  visibility_timeout_sec: 30\n'
                    '  long_poll_time_sec: 0\n  num_iterations: 5\n  prefetch: 4\n')
    assert load_queue_config(str(path))['q'].prefetch == 4


# --- in a worker ---------------------------------------------------------------


class Seen(WorkerHooks):
    """Batch sizes, releases and when each success was reported."""

    def __init__(self):
        self.sizes: list[int] = []
        self.deferred: list[str] = []
        self.succeeded: list[tuple[str, float]] = []

    def before_batch(self, queue, batch):
        self.sizes.append(len(batch.unsettled()))

    def on_task_released(self, settlement):
        self.deferred.append(settlement.task_id)

    def on_task_succeeded(self, settlement):
        self.succeeded.append((settlement.task_id, time.time()))


def run(broker, queue='default', **kwargs):
    seen = Seen()
    Worker(queue_names=[queue], burst=True, broker=broker, hooks=[seen], **kwargs).run()
    return seen


def test_a_worker_takes_whole_batches_of_fast_tasks_from_the_first_receive(memory_broker, record):
    ids = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(25)])
    seen = run(memory_broker)
    assert sorted(recorded_ids(record, 'ran')) == sorted(ids)
    assert seen.sizes[:3] == [10, 10, 5]
    assert seen.deferred == []


def test_a_worker_holds_no_more_slow_tasks_than_it_starts_within_the_window(memory_broker, record):
    """Tasks of 0.4 s on the worker's clock (the window is one second): the
    first, blind batch gives back at once what has not started after a
    second; later receives take two, never ten. Every task runs once."""
    from tests.support.clock import FakeClock
    clock = FakeClock()
    tasks.ClockedTask.clock = clock
    ids = tasks.ClockedQuickTask.publish_batch(None, [((0.4,), {}) for _ in range(6)])
    seen = Seen()
    Worker(queue_names=['default'], burst=True, broker=memory_broker, hooks=[seen],
           clock=clock).run()
    assert sorted(recorded_ids(record, 'start')) == sorted(ids)
    assert seen.sizes[0] == 6
    # Started at 0, 0.4 and 0.8 s; once the third ended (1.2 s) the rest went back.
    assert len(seen.deferred) == 3 and len(set(seen.deferred)) == 3
    assert max(seen.sizes[1:]) == 2


def test_long_tasks_are_each_released_at_most_once_then_received_alone(memory_broker, record):
    """Tasks whose time limit does not fit the queue's visibility timeout run
    alone. The first, blind receive takes them all: one runs, the others go
    back once; from then on the worker receives one at a time, so none is
    received with another only to be released for it again."""
    ids = tasks.LongTask.publish_batch(None, [((0.0,), {}) for _ in range(5)])
    seen = run(memory_broker, queue='beat')
    assert sorted(recorded_ids(record, 'ran')) == sorted(ids)
    assert len(seen.deferred) == 4 and set(seen.deferred) <= set(ids)
    # The first, blind batch brought all five; from then on each came alone.
    assert seen.sizes == [5, 1, 1, 1, 1]


def test_a_long_batch_is_settled_and_reported_in_parts_as_its_tasks_end(memory_broker, record,
                                                                       monkeypatch):
    """Tasks of 0.3 s four to a batch: the first task's success is deleted and
    reported while the batch's next task still runs, not after the batch."""
    monkeypatch.setattr(serial, 'SETTLE_PARTS_AFTER_SEC', 0.1)
    tasks.SlowTask.publish_batch(None, [((0.3,), {}) for _ in range(4)])
    seen = run(memory_broker)
    assert seen.sizes[0] == 4
    starts = {r[1]: float(r[3]) for r in read_records(record) if r[0] == 'start'}
    order = sorted(starts, key=starts.get)
    first, second = order[0], order[1]
    reported = dict(seen.succeeded)
    assert reported[first] < starts[second] + 0.3      # before the second one ended


@pytest.mark.real_time("shows that the worker spent its own time, not the machine's")
def test_parts_are_settled_as_the_workers_clock_moves_not_the_wall_clock(memory_broker, record):
    """The worker reads time through the clock it is given: tasks that take
    4 s on that clock (and no real time) are settled and reported in parts."""
    from tests.support.clock import FakeClock
    clock = FakeClock()
    tasks.ClockedTask.clock = clock
    tasks.ClockedQuickTask.publish_batch(None, [((4.0,), {}) for _ in range(4)])
    reported = []

    class Reported(WorkerHooks):
        def on_task_succeeded(self, settlement):
            reported.append((settlement.task_id, clock.now))

    worker = Worker(queue_names=['default'], burst=True, broker=memory_broker, hooks=[Reported()],
                    clock=clock)
    worker.prefetch.window_sec = 100.0           # whole batches after the first receive
    started = time.monotonic()
    assert worker.run() == 0
    # 16 s of tasks on the worker's clock, which a loaded machine's pauses
    # (a second or two) do not come near.
    assert time.monotonic() - started < 8.0
    starts = sorted((float(r[4]), r[1]) for r in read_records(record) if r[0] == 'start')
    assert len(starts) == 4 and clock.now >= 1000.0 + 16.0
    when = dict(reported)
    # The second batch's first task is reported before its last one starts.
    assert when[starts[1][1]] <= starts[3][0]


def test_a_blind_batch_counts_its_window_from_its_first_start_not_its_receive(
        memory_broker, record):
    """The worker's own work between a blind batch's receive and its first
    task (a records store migrating on a loaded machine took more than the
    window in CI) gives nothing back: the window runs from the first start,
    and a batch of quick tasks all run in it."""
    from tests.support.clock import FakeClock
    clock = FakeClock()
    ids = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(3)])

    class SlowToStart(WorkerHooks):
        def before_batch(self, queue, batch):
            clock.advance(5.0)          # past the 1 s window, before any task started

    worker = Worker(queue_names=['default'], burst=True, broker=memory_broker,
                    hooks=[SlowToStart()], clock=clock)
    assert worker.run() == 0
    assert sorted(recorded_ids(record, 'ran')) == sorted(ids)
    assert worker.stats.get('release', 0) == 0
