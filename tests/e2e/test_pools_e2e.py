"""Real `kale worker --pool threads|asyncio` processes against the embedded
endpoint: tasks side by side, a SIGTERM, kill -9, and a stuck task that makes
the supervisor start a fresh worker. (The chaos run in test_chaos.py runs
every pool too.)"""
from __future__ import annotations

import collections
import signal

import pytest

from tests import pool_tasks, tasks
from tests.support.processes import WorkerProcess, events, wait_for
from tests.support.records import most_at_once, recorded_ids

pytestmark = pytest.mark.slow

ids = recorded_ids
POOLS = ['threads', 'asyncio']


@pytest.mark.parametrize('pool', POOLS)
def test_plain_and_coroutine_tasks_run_side_by_side_and_none_is_lost(sqs, record, tmp_path,
                                                                      pool):
    spans = pool_tasks.AsyncSpanTask.publish_batch(None, [((0.5,), {}) for _ in range(8)])
    plain = pool_tasks.SpanTask.publish_batch(None, [((0.5,), {}) for _ in range(8)])
    quick = tasks.QuickTask.publish_batch(None, [((i,), {}) for i in range(20)])
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst', '--pool', pool,
                           '--max-in-flight', '8')
    assert worker.wait(90) == 0, worker.output()
    # (what the worker said, should a task run twice: its deliveries and settles)
    assert sorted(ids(record, 'end')) == sorted(spans + plain), worker.output()
    assert sorted(ids(record, 'ran')) == sorted(quick), worker.output()
    assert most_at_once(record) >= 4, 'the tasks did not run side by side'


@pytest.mark.parametrize('pool', POOLS)
def test_sigterm_lets_the_running_tasks_end_and_releases_the_rest(sqs, record, tmp_path, pool):
    published = pool_tasks.AsyncSpanTask.publish_batch(None, [((2.0,), {}) for _ in range(10)])
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--pool', pool,
                           '--max-in-flight', '3')
    wait_for(lambda: len(events(record, 'start')) >= 3, 30, 'three tasks to start')
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output()
    started, ended = ids(record, 'start'), ids(record, 'end')
    assert sorted(started) == sorted(ended) and 3 <= len(started) < 10
    left = sqs.receive_all('default', expected=10 - len(started), timeout=10)   # not after 30 s
    assert sorted(sqs.decode(m['Body']).task_id for m in left) == \
        sorted(set(published) - set(started))


@pytest.mark.parametrize('pool', POOLS)
def test_kill_9_of_a_worker_with_many_tasks_in_flight_loses_nothing(sqs, record, tmp_path,
                                                                     pool):
    published = pool_tasks.AsyncShortTask.publish_batch(None, [((1.0,), {})] * 6)
    worker = WorkerProcess(tmp_path, '--queues', 'short', '--pool', pool)
    wait_for(lambda: len(events(record, 'start')) >= 3, 30, 'tasks to start')
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    second = WorkerProcess(tmp_path, '--queues', 'short', '--burst', '--pool', pool)
    assert second.wait(90) == 0, second.output()
    assert set(ids(record, 'ran')) == set(published)


def test_a_stuck_task_makes_its_worker_exit_4_and_the_supervisor_starts_a_fresh_one(
        sqs, record, tmp_path):
    stuck = pool_tasks.StuckOnceTask.publish(None)
    others = tasks.ShortVisibilityTask.publish_batch(None, [((), {})] * 3)
    supervisor = WorkerProcess(tmp_path, '--queues', 'short', '--burst', '--pool', 'threads',
                               '--concurrency', '1', KALE_TEST_STUCK_GRACE='1')
    assert supervisor.wait(90) == 0, supervisor.output()
    output = supervisor.output()
    assert 'task %s (tests.pool_tasks.StuckOnceTask) is still running' % stuck in output
    assert 'exited with code 4' in output or 'code 4' in output, output
    assert ids(record, 'stuck') == [stuck]
    assert sorted(ids(record, 'ran')) == sorted(others + [stuck])


def test_tasks_a_killed_asyncio_worker_held_run_together_after_the_restart(sqs, record, tmp_path):
    """Two hundred tasks of fifteen seconds each (long enough for all to start
    on a loaded machine before the first ends), all running on an asyncio
    worker killed with SIGKILL: a new worker runs them again as they come
    back, a hundred at a time (not one by one, the rest sent back), so they
    finish within a few of their run times; each runs at most twice."""
    published = pool_tasks.AsyncRecoveryTask.publish_batch(None, [((15.0,), {})] * 200)
    worker = WorkerProcess(tmp_path, '--queues', 'recovery', '--pool', 'asyncio',
                           '--max-in-flight', '200')
    wait_for(lambda: len(events(record, 'start')) >= 200, 60, 'two hundred tasks to start')
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    killed = {r[1] for r in events(record, 'start')} - {r[1] for r in events(record, 'end')}
    # (on a loaded machine the receives of two hundred take seconds, and the
    # first tasks may end before the last start: half is enough to tell)
    assert len(killed) >= 100, 'the worker was killed after most of them ended'
    second = WorkerProcess(tmp_path, '--queues', 'recovery', '--burst', '--pool', 'asyncio')
    assert second.wait(180) == 0, second.output()
    assert sorted({r[1] for r in events(record, 'end')}) == sorted(set(published))
    output = second.output()
    assert ' released: ' not in output, output              # none sent back
    runs = collections.Counter(r[1] for r in events(record, 'start'))
    assert max(runs.values()) <= 2
    pid = next(r[2] for r in events(record, 'start') if r[1] in killed and runs[r[1]] == 2
               and r[2] != str(worker.process.pid))
    assert most_at_once(record, pid) >= 50, 'the tasks killed did not run together'

