"""``raise Retry(after=1)`` in a real ``kale worker`` process against the
embedded endpoint: the task runs again a second later, not at once (its own
retries would be at once here), and then succeeds."""
from __future__ import annotations

import pytest

from tests import retry_tasks as rt
from tests.support.processes import WorkerProcess, events

pytestmark = pytest.mark.slow


@pytest.mark.parametrize('task_class, pool', [(rt.RetryAfterTask, 'serial'),
                                              (rt.AsyncRetryAfterTask, 'asyncio')])
def test_a_worker_runs_a_task_again_after_the_delay_it_asked_for(sqs, record, tmp_path,
                                                                 task_class, pool):
    task_id = task_class.publish(None, 1)
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--burst', '--pool', pool,
                           KALE_TEST_RETRY_DELAY='0')
    assert worker.wait(90) == 0, worker.output()
    first, second = events(record, 'start')
    assert (first[1], first[4], second[1], second[4]) == (task_id, '0', task_id, '1')
    assert float(second[3]) - float(first[3]) >= 1.0, worker.output()
    assert [r[1] for r in events(record, 'ran')] == [task_id]
    assert 'retrying in 1s: Retry: after 1 s: ThrottledError: 429 Too Many Requests' \
        in worker.output()
