"""A workflow run by real `kale worker` processes over HTTP: a fan-out into a
chord across two queues, each served by its own worker, state in SQLite."""
import os
import signal
import subprocess
import sys

import pytest

from kale import workflow
from tests import workflow_tasks as wt
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.processes import WorkerProcess, wait_for

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


SUBMIT_THEN_DIE = '''
import os, signal
from kale import workflow
from kale.workflow import run
from tests import workflow_tasks as wt

def die(state, ready, app):          # recorded, committed, and killed before the publish
    os.kill(os.getpid(), signal.SIGKILL)

run.publish_nodes = die
workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(3)))
'''


def test_a_submitter_killed_between_commit_and_publish_loses_nothing(sqs, records_url, tmp_path):
    """The roots recorded but never published are published by a worker's
    sweep (once its grace is past), and the workflow completes."""
    died = subprocess.run([sys.executable, '-c', SUBMIT_THEN_DIE], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr
    [listed] = workflow.list_workflows()
    wf = workflow.get(listed['id'])
    assert sorted((n['state'], n['published']) for n in wf.describe()['nodes']) == \
        [('pending', False), ('queued', False)]
    worker = WorkerProcess(tmp_path, '--queues', 'default')
    try:
        assert wf.wait(60) == 'succeeded'
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert wf.result() == 6
    assert 'publishing 1 workflow nodes left unpublished' in worker.output()


def test_a_worker_killed_in_the_middle_of_a_node(sqs, records_url, tmp_path):
    """The node runs again on the other worker once its message is visible
    again (queue 'short': 4 s); the workflow completes and the node after
    it is published, and runs, once."""
    slow, after = tmp_path / 'slow.pids', tmp_path / 'after.pids'
    flow = workflow.chain(wt.Add.s(1, 2),
                          wt.Mark.with_options(queue='short').s(str(slow), 3.0),
                          wt.Mark.s(str(after)))
    workers = [WorkerProcess(tmp_path, '--queues', 'short,default') for _ in range(2)]
    try:
        for worker in workers:
            worker.wait_for_log('serving queues')
        wf = workflow.submit(flow)
        wait_for(lambda: slow.exists() and slow.read_text().strip(), 30, 'the slow node to start')
        pid = int(slow.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        assert wf.wait(60) == 'succeeded'
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.signal(signal.SIGTERM)
        codes = sorted(worker.wait(30) for worker in workers)
    assert codes == [-signal.SIGKILL, 0]
    assert wf.result() == 5
    runs = slow.read_text().split()
    assert len(runs) >= 2 and runs[0] != runs[-1]            # again, on the other worker
    assert len(after.read_text().split()) == 1               # published and run once
