"""Operators' controls on real `kale worker` processes, through the command
line: a paused queue is not received from while the worker's other queues
run (its messages wait in SQS) and runs again once resumed; `kale workers
stop` ends a worker with exit 0, and a `--concurrency` supervisor does not
restart a worker stopped so (stopped itself, it stops the others)."""
from __future__ import annotations

import pytest

from kale import records
from tests import records_tasks as rt
from tests.support.processes import WorkerProcess, console_script, wait_for

pytestmark = pytest.mark.slow

#: How soon a worker must read a pause, a resume or a stop (it reads them
#: with its heartbeat, every 2 s, on a writer round of at most 1 s).
CONTROL_SEC = 5
#: How soon workers must have started and recorded themselves: each imports
#: Kale and declares its queues, which on a loaded 2-core machine takes
#: seconds per process (an upper bound; the tests go on as soon as they have).
START_SEC = 60


def running_workers(role: str = 'worker') -> list:
    return [w for w in records.queries().workers('running') if w.role == role]


def kale(*args: str) -> str:
    result = console_script(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def statuses(task_ids) -> set:
    return {records.get(task_id).status for task_id in task_ids}


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_a_paused_queue_waits_in_sqs_while_the_others_run_and_a_stop_ends_the_worker(
        pool, sqs, records_url, tmp_path):
    worker = WorkerProcess(tmp_path, '--pool', pool, '--queues', 'default,low')
    try:
        wait_for(lambda: running_workers(), START_SEC, 'the worker to record itself', worker.output)
        assert 'paused queue default' in kale('queues', 'pause', 'default')
        wait_for(lambda: 'queue default paused' in worker.output(), CONTROL_SEC,
                 'the worker to read the pause')
        held = rt.PlainTask.publish_batch(None, [((n,), {}) for n in range(5)])
        for _ in range(3):          # the worker keeps receiving from its other queue
            others = rt.LowPlainTask.publish_batch(None, [((n,), {}) for n in range(3)])
            wait_for(lambda ids=others: statuses(ids) == {'succeeded'}, 30,
                     'the low tasks to run')
        assert statuses(held) == {'queued'}
        assert sqs.count('default') == 5                        # waiting in SQS
        assert 'paused: default since' in kale('queues')
        assert 'resumed queue default' in kale('queues', 'resume', 'default')
        wait_for(lambda: 'queue default resumed' in worker.output(), CONTROL_SEC,
                 'the worker to read the resume')
        wait_for(lambda: statuses(held) == {'succeeded'}, 30, 'the held tasks to run')
        [me] = running_workers()
        said = kale('workers', 'stop', me.id.rsplit('@', 1)[0])        # host:pid will do
        assert 'asked worker %s to stop' % me.id in said
        assert worker.wait(CONTROL_SEC + 10) == 0, worker.output()
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert 'a stop was asked' in worker.output()
    assert records.queries().workers()[0].state == 'stopped'


def test_a_supervisor_does_not_restart_a_worker_stopped_and_stops_them_all_when_asked(
        sqs, records_url, tmp_path):
    group = WorkerProcess(tmp_path, '--concurrency', '2', '--pool', 'threads',
                          '--queues', 'default')
    try:
        wait_for(lambda: len(running_workers()) == 2 and running_workers('supervisor'), START_SEC,
                 'two workers and their supervisor to record themselves', group.output)
        first, second = running_workers()
        kale('workers', 'stop', first.id)
        wait_for(lambda: 'exited with 0' in group.output(), CONTROL_SEC + 10,
                 'the stopped worker to exit', group.output)
        task_id = rt.PlainTask.publish(None, 1)         # the other one still works
        wait_for(lambda: statuses([task_id]) == {'succeeded'}, 30, 'the task to run',
                 group.output)
        [supervisor] = running_workers('supervisor')
        assert [w.id for w in running_workers()] == [second.id]
        kale('workers', 'stop', supervisor.id)
        assert group.wait(CONTROL_SEC + 10) == 0, group.output()
    finally:
        if group.process.poll() is None:
            group.process.kill()
    assert group.output().count('supervisor: started worker') == 2, group.output()
    assert 'restarting' not in group.output()


def test_stopping_a_worker_that_stopped_or_does_not_exist_is_one_clear_line(sqs, records_url,
                                                                             tmp_path):
    from tests.support.processes import one_line_error
    worker = WorkerProcess(tmp_path, '--burst', '--queues', 'default')
    assert worker.wait(30) == 0
    [gone] = records.queries().workers()
    assert 'stopped at' in one_line_error(console_script('workers', 'stop', gone.id))
    assert 'no worker recorded as nobody' in one_line_error(
        console_script('workers', 'stop', 'nobody'))
    assert "'nowhere'" in one_line_error(console_script('queues', 'pause', 'nowhere'))
