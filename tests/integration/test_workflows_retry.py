"""workflow.retry and the status of nodes that ran while their workflow
ended, with real worker loops on the in-memory transport and the workflows'
state on SQLite and on PostgreSQL: a chord whose member failed for a cause
since fixed completes, its succeeded members not run again and its
callback run once; a cancelled workflow runs what never ran; a workflow
running or succeeded, or an unknown one, is refused."""
import collections
import time

import pytest

from kale import records, workflow
from kale.app import default_app
from kale.exceptions import WorkflowConflictError, WorkflowNotFoundError
from kale.workflow.run import _state
from tests import workflow_tasks as wt
from tests.support.clock import FakeClock
from tests.support.work import work


@pytest.fixture
def broker(memory_broker, any_records_url):
    wt.RUNS.clear()
    wt.FAILING.clear()
    yield memory_broker
    wt.RUNS.clear()
    wt.FAILING.clear()


def until_final(broker, wf, rounds=10):
    """Run burst workers until the workflow has ended and nothing is queued."""
    for _ in range(rounds):
        work(broker)
        if wf.status() != 'running' and not any(
                broker.counts(queue).total for queue in broker.queues.values()):
            break
    return wf.status()


def states(wf):
    return {node['task_id']: node['state'] for node in wf.nodes()}


def test_a_failed_chord_resumes_once_fixed_its_succeeded_members_not_run_again(broker):
    wt.FAILING.add(3)
    header = workflow.map(wt.Tally, range(5))
    callback = wt.TallyTotal.s()
    members = [node.task_id for node in header.parts]
    wf = workflow.submit(workflow.chord(header, callback))
    assert until_final(broker, wf) == 'failed'
    assert states(wf) == {**{m: 'succeeded' for m in members}, members[3]: 'failed',
                          callback.task_id: 'failed'}
    assert records.get(members[3]).attempts == 1

    wt.FAILING.clear()                               # the cause is fixed
    assert workflow.retry(wf.id).status() == 'running'
    assert until_final(broker, wf) == 'succeeded'
    assert wf.result() == sum(2 * i for i in range(5))
    assert collections.Counter(wt.RUNS) == {0: 1, 1: 1, 2: 1, 3: 2, 4: 1, 'total': 1}
    assert set(states(wf).values()) == {'succeeded'}
    assert records.get(members[3]).attempts == 2     # its attempts count on
    history = records.attempts(members[3])
    assert [(a['attempt'], a['status']) for a in history] == [(1, 'failed'), (2, 'succeeded')]
    assert 'cannot take 3 yet' in history[0]['error_message']


def test_members_that_ran_while_the_chord_failed_keep_succeeded(broker):
    """The failure ends the chord while its other members run: each one
    that then succeeds is succeeded, its result kept; the callback failed."""
    wt.FAILING.add(0)
    header = workflow.map(wt.Tally, [0, 1, 2])
    wf = workflow.submit(workflow.chord(header, wt.TallyTotal.s()))
    first, running, waiting = (node.task_id for node in header.parts)
    state = _state(default_app())
    state.fail(first, 'boom', time.time())            # 1 and 2 are cancelled, not run
    assert [states(wf)[t] for t in (first, running, waiting)] == \
        ['failed', 'cancelled', 'cancelled']
    state.complete(running, 2, time.time())           # 1 was running: it succeeded
    assert [states(wf)[t] for t in (first, running, waiting)] == \
        ['failed', 'succeeded', 'cancelled']
    assert state.results([running]) == {running: 2}
    assert wf.status() == 'failed'


def test_a_cancelled_workflow_runs_again_what_never_ran(broker):
    first = wt.Tally.s(1)
    then = wt.Tally.with_options(queue='low').s(10)
    wf = workflow.submit(workflow.group(first, wt.Add.s(workflow.ref(first), 0), then))
    work(broker, queues=['default'])                 # first and its Add run; `then` waits
    workflow.cancel(wf.id)
    work(broker)                                     # `then`'s task is deleted unrun
    assert wf.status() == 'cancelled'
    assert states(wf)[then.task_id] == 'cancelled' and wt.RUNS == [1]
    assert records.get(then.task_id).status == 'cancelled'

    workflow.retry(wf.id)
    assert until_final(broker, wf) == 'succeeded'
    assert wf.result() == [2, 2, 20]
    assert wt.RUNS == [1, 10]                        # what succeeded did not run again
    assert records.get(then.task_id).status == 'succeeded'


def test_a_node_run_again_is_queued_in_its_record_before_it_is_sent(broker, monkeypatch):
    """A worker that receives a node run again before the publish's own
    record is written finds the task queued, not still cancelled: it runs it."""
    from kale.records import hooks
    then = wt.Tally.with_options(queue='low').s(10)
    wf = workflow.submit(workflow.group(wt.Tally.s(1), then))
    work(broker, queues=['default'])
    workflow.cancel(wf.id)
    work(broker)
    assert records.get(then.task_id).status == 'cancelled' and wt.RUNS == [1]
    monkeypatch.setattr(hooks, 'publication_rows', lambda *args: [])   # not written yet
    workflow.retry(wf.id)
    assert until_final(broker, wf) == 'succeeded'
    assert wt.RUNS == [1, 10]


def test_a_join_waits_again_for_every_input_that_did_not_succeed(broker):
    wt.FAILING.update({1, 2})
    left, right = wt.Tally.s(1), wt.Tally.s(2)
    join = wt.Pair.s(workflow.ref(left), workflow.ref(right))
    wf = workflow.submit(join)                        # left and right come with it
    assert until_final(broker, wf) == 'failed'
    wt.FAILING.clear()
    workflow.retry(wf.id)
    nodes = {node['task_id']: node for node in wf.describe()['nodes']}
    assert nodes[join.task_id]['state'] == 'pending'
    assert until_final(broker, wf) == 'succeeded' and wf.result() == [2, 4]


def test_a_retry_gives_the_deadline_its_span_again(broker):
    clock = FakeClock(time.time())
    wf = workflow.submit(wt.Tally.s(1), deadline_sec=30, clock=clock)
    state = _state(default_app())
    clock.advance(31)
    state.expire(wf.id, clock.time())
    assert state.store.workflow(wf.id).status == 'failed'
    clock.advance(100)
    workflow.retry(wf.id, clock=clock)
    assert state.store.workflow(wf.id).deadline_at == clock.time() + 30
    assert until_final(broker, wf) == 'succeeded'


def test_a_running_or_succeeded_workflow_or_an_unknown_one_is_refused(broker):
    running = workflow.submit(wt.Tally.s(1))
    with pytest.raises(WorkflowConflictError, match=r'^workflow %s cannot be retried: it is '
                                                    r'running \(only a failed or cancelled one '
                                                    r'can be\)$' % running.id):
        workflow.retry(running.id)
    assert until_final(broker, running) == 'succeeded'
    with pytest.raises(WorkflowConflictError, match=r'it is succeeded \(only'):
        workflow.retry(running.id)
    with pytest.raises(WorkflowNotFoundError, match=r'^no workflow nope in the task records$'):
        workflow.retry('nope')
    assert wt.RUNS == [1]
