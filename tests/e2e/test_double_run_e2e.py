"""A task must not run twice because its worker held it past its budget.

Two queues wake an idle worker at once: a long task (run alone, under a
heartbeat) and a quick one on a queue with a shorter visibility timeout. The
quick message arrives while the long task runs and cannot wait that long.
"""
from __future__ import annotations

import signal
import time

import pytest

from tests import tasks
from tests.support.processes import WorkerProcess, wait_for
from tests.support.records import recorded_ids

pytestmark = pytest.mark.slow

QUEUES = """
rp-fast:
  priority: 50
  batch_size: 10
  visibility_timeout_sec: 4
  long_poll_time_sec: 5
  num_iterations: 5
rp-slow:
  priority: 50
  batch_size: 10
  visibility_timeout_sec: 2
  long_poll_time_sec: 5
  num_iterations: 5
"""


@pytest.fixture
def racing_queues(tmp_path, monkeypatch, settings_env):
    path = tmp_path / 'queues.yaml'
    path.write_text(QUEUES)
    monkeypatch.setenv('KALE_TEST_QUEUE_CONFIG', str(path))
    settings_env()
    return path


def test_a_quick_task_that_arrives_during_a_long_one_is_delivered_once(sqs, record, tmp_path,
                                                                     racing_queues):
    """The test plays a second worker: once the quick message's first delivery
    would have lapsed, it receives from the quick queue and holds what it
    gets. Had the worker held the message past its budget and then sent a
    copy, the task would be delivered twice: the lapsed original to the test,
    the copy to the worker."""
    worker = WorkerProcess(tmp_path, '--queues', 'rp-fast,rp-slow')
    taken = []
    try:
        worker.wait_for_log('serving queues')
        time.sleep(0.5)                          # both long polls are out: the worker is idle
        long_id = tasks.RacingLongTask.publish(None, 6.0)
        time.sleep(0.3)                          # the long task has started
        quick_id = tasks.RacingQuickTask.publish(None)
        time.sleep(4.5)                          # past the quick message's visibility timeout
        taken = [sqs.decode(m['Body'], 'rp-fast').task_id for m in sqs.client.receive_message(
            QueueUrl=sqs.queue_url('rp-fast'), MaxNumberOfMessages=10, WaitTimeSeconds=0,
            VisibilityTimeout=60).get('Messages', [])]
        wait_for(lambda: long_id in recorded_ids(record, 'ran'), 30, 'the long task to end')
        time.sleep(2.0)                          # the worker is free to run what it holds
    finally:
        worker.signal(signal.SIGTERM)
        worker.wait(15)
    deliveries = taken + recorded_ids(record, 'ran')
    assert deliveries.count(quick_id) == 1, worker.output()
    assert deliveries.count(long_id) == 1, worker.output()
