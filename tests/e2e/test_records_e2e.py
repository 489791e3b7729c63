"""Task records written by real `kale worker` processes against the embedded
endpoint: concurrent workers on one SQLite file, a PostgreSQL outage in the
middle of a run, and cancellations racing a worker."""
from __future__ import annotations

import signal

import pytest

from kale import records
from kale.records.queries import TaskFilter
from tests import records_tasks as rt
from tests import tasks
from tests.support.processes import WorkerProcess, wait_for
from tests.support.records import recorded_ids

pytestmark = pytest.mark.slow


def counts(**filters):
    return records.queries().summary(TaskFilter(**filters))['by_status']


def test_two_workers_and_their_supervisor_record_every_task(sqs, records_url, tmp_path):
    ids = tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(30)])
    failed = tasks.FailingTask.publish(None)
    worker = WorkerProcess(tmp_path, '--burst', '--concurrency', '2',
                           KALE_TEST_RETRY_DELAY='0')
    assert worker.wait(90) == 0, worker.output()
    by_status = counts()
    assert by_status['succeeded'] == 30 and by_status['failed'] == 1, worker.output()
    assert records.get(failed).attempts == 5         # the first run and four retries
    assert all(records.get(i).status == 'succeeded' for i in ids[:3])
    roles = sorted((w.role, w.state) for w in records.queries().workers())
    assert roles == [('supervisor', 'stopped'), ('worker', 'stopped'), ('worker', 'stopped')], \
        worker.output()


def test_a_store_outage_mid_run_loses_no_task_and_records_catch_up(sqs, postgres_url,
                                                                 postgres_cluster, tmp_path):
    ids = rt.NapTask.publish_batch(None, [((0.1,), {}) for _ in range(40)])
    worker = WorkerProcess(tmp_path, KALE_TEST_HEARTBEAT='0.5')
    try:
        wait_for(lambda: counts()['succeeded'] >= 5, 30, 'the first tasks recorded')
        postgres_cluster.stop()
        try:
            worker.wait_for_log('records: writing', 30)     # it noticed, and kept working
            queue = sqs.queue_url('default')
            wait_for(lambda: int(sqs.client.get_queue_attributes(
                QueueUrl=queue, AttributeNames=['All'])['Attributes']
                ['ApproximateNumberOfMessages']) == 0, 30, 'the queue drained while the '
                                                           'store was down')
        finally:
            postgres_cluster.start()
        wait_for(lambda: counts()['succeeded'] == 40, 30, 'every record caught up')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert {records.get(i).status for i in ids} == {'succeeded'}


def test_a_cancel_racing_a_worker_either_cancels_or_lets_the_task_run(sqs, records_url, record,
                                                                      tmp_path):
    ids = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(40)])
    worker = WorkerProcess(tmp_path)
    try:
        cancelled = []
        for task_id in ids[::2]:
            try:
                records.cancel(task_id)
                cancelled.append(task_id)
            except records.RecordConflictError:
                pass
        wait_for(lambda: counts()['pending'] == 0, 30, 'every task settled')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    ran = set(recorded_ids(record, 'ran'))
    statuses = {i: records.get(i).status for i in ids}
    assert {i for i, s in statuses.items() if s == 'succeeded'} == ran
    assert {i for i, s in statuses.items() if s == 'cancelled'} == set(ids) - ran
    assert set(ids[1::2]) <= ran                 # never cancelled, all ran
    assert any(s == 'cancelled' for s in statuses.values())
