"""A `kale worker` whose endpoint answers 200 with the wrong shape (issue 61:
such answers stopped the worker within seconds): it stays up, logs one line
per failed request, and the messages it received in those answers come back
after their visibility timeout and run."""
import signal

import pytest

from bench.faults import WRONG_SHAPES, FaultProxy
from tests import tasks
from tests.support.processes import WorkerProcess, wait_for
from tests.support.records import recorded_ids

pytestmark = pytest.mark.slow


@pytest.mark.parametrize('pool', ['serial', 'threads'])
def test_a_worker_survives_answers_of_the_wrong_shape_and_loses_nothing(sqs, record, tmp_path,
                                                                        pool):
    proxy = FaultProxy(sqs.url, seed=1).start()
    worker = None
    try:
        # On the 'short' queue a message received in a wrong answer is back in 4 s.
        published = tasks.ShortRecordTask.publish_batch(None, [((i,), {}) for i in range(3)])
        proxy.inject('wrong_shape', 120, probability=1.0, operations=['ReceiveMessage'])
        worker = WorkerProcess(tmp_path, '--queues', 'short', '--pool', pool,
                               endpoint=proxy.url)
        wait_for(lambda: worker.process.poll() is not None
                 or all(proxy.shapes[('ReceiveMessage', shape)]
                        for shape in WRONG_SHAPES['ReceiveMessage']), 60,
                 'a receive answer of each wrong shape')
        proxy.calm()
        assert worker.process.poll() is None, 'the worker exited:\n' + worker.output()
        wait_for(lambda: set(recorded_ids(record, 'ran')) >= set(published), 60,
                 'the tasks received in wrong answers to run')
        # Deletes answered with the wrong shape: failed, logged, the worker still up.
        more = tasks.ShortRecordTask.publish_batch(None, [((i,), {}) for i in range(3, 5)])
        proxy.inject('wrong_shape', 120, probability=1.0, operations=['DeleteMessageBatch'])
        wait_for(lambda: sum(count for (operation, _), count in proxy.shapes.items()
                             if operation == 'DeleteMessageBatch') >= 2, 60,
                 'delete answers of the wrong shape')
        proxy.calm()
        wait_for(lambda: set(recorded_ids(record, 'ran')) >= set(published + more), 60,
                 'the later tasks to run')
        assert worker.process.poll() is None, 'the worker exited:\n' + worker.output()
    finally:
        if worker is not None:
            worker.signal(signal.SIGTERM)
            code = worker.wait(60)
        proxy.stop()
    output = worker.output()
    assert code == 0, output
    assert 'Traceback' not in output, output
    malformed = [line for line in output.splitlines() if 'is malformed' in line]
    assert len(malformed) == sum(proxy.shapes.values()), output      # one line per answer
    for shape in ('Messages is a string, not a list', 'a message has no MessageId',
                  'ApproximateReceiveCount', 'JSON nested too deeply',
                  'not one of the', 'DeleteMessageBatch on queue'):
        assert any(shape in line for line in malformed), (shape, output)
