"""A workflow run by real `kale worker` processes over HTTP: a fan-out into a
chord across two queues, each served by its own worker, state in SQLite."""
import signal

import pytest

from kale import workflow
from tests import workflow_tasks as wt
from tests.support.processes import WorkerProcess

pytestmark = pytest.mark.slow


def test_a_chord_across_two_queues_served_by_two_workers(sqs, records_url, tmp_path):
    header = workflow.group(*(wt.Add.s(i, 1) for i in range(12)))
    last = wt.Pair.s('done')                                    # runs on 'low'
    wf = workflow.submit(workflow.chain(workflow.chord(header, wt.Total.s(0)), last))
    default = WorkerProcess(tmp_path, '--queues', 'default', '--pool', 'asyncio')
    low = WorkerProcess(tmp_path, '--queues', 'low')
    try:
        assert wf.wait(60) == 'succeeded'
    finally:
        for worker in (default, low):
            worker.signal(signal.SIGTERM)
        assert (default.wait(30), low.wait(30)) == (0, 0)
    assert wf.result() == [sum(range(1, 13)), 'done']
    queues = {n['task']: n['queue'] for n in wf.nodes()}
    assert queues['tests.workflow_tasks.Pair'] == 'low'
