"""Workflows run by real worker loops on the in-memory transport, their state
on SQLite and on PostgreSQL: results flow downstream, a join is published
once, a flow's own result comes back."""
import time

import pytest

from kale import records, workflow
from kale.app import default_app
from kale.exceptions import InvalidFlowError, WorkflowError, WorkflowFailed
from kale.store.sql.schema import workflow_nodes
from tests import workflow_tasks as wt
from tests.support.clock import ShiftedClock
from tests.support.work import work


@pytest.fixture
def broker(memory_broker, any_records_url):
    return memory_broker


def run_until_final(broker, flow, rounds=10, **options):
    wf = workflow.submit(flow, **options)
    for _ in range(rounds):
        if wf.status() != 'running':
            break
        work(broker)
    return wf


def test_a_diamond_gives_the_join_both_results(broker):
    a = wt.Add.s(1, 2)
    b, c = wt.Add.s(workflow.ref(a), 10), wt.Add.s(workflow.ref(a), 20)
    d = wt.Pair.s(workflow.ref(b), workflow.ref(c))
    wf = run_until_final(broker, workflow.group(a, b, c, d))
    assert wf.status() == 'succeeded'
    assert wf.result() == [3, 13, 23, [13, 23]]
    nodes = {n['task_id']: n for n in wf.nodes()}
    assert nodes[d.task_id]['upstream'] == [b.task_id, c.task_id]
    assert nodes[d.task_id]['queue'] == 'low' and {n['state'] for n in nodes.values()} == \
        {'succeeded'}


def test_submitting_a_part_runs_every_node_its_references_reach(broker):
    """d refers to b and c, which refer to a: submitting d runs all four,
    a once, and gives d's result."""
    a = wt.Add.s(1, 2)
    b, c = wt.Add.s(workflow.ref(a), 10), wt.Add.s(workflow.ref(a), 20)
    d = wt.Pair.s(workflow.ref(b), workflow.ref(c))
    wf = run_until_final(broker, d)
    assert wf.result() == [13, 23]
    assert {n['task_id'] for n in wf.nodes()} == {a.task_id, b.task_id, c.task_id, d.task_id}
    assert records.get(a.task_id).status == 'succeeded'


def test_a_chain_passes_each_result_on(broker):
    links = [wt.Add.s(1)] + [wt.Add.s(1) for _ in range(9)]
    wf = run_until_final(broker, workflow.chain(*links), rounds=15)
    assert wf.result() == 10
    assert workflow.get(wf.id).status() == 'succeeded'


@pytest.mark.usefixtures('pool')      # on each pool: serial, threads, asyncio
def test_a_chord_gives_its_callback_every_result_in_order(broker):
    header = workflow.group(*(wt.Add.s(i, i) for i in range(20)))
    wf = run_until_final(broker, workflow.chord(header, wt.Total.s(1000)))
    assert wf.result() == sum(2 * i for i in range(20)) + 1000


def test_a_node_can_be_placed_on_another_queue(broker):
    a = wt.Add.with_options(queue='high').s(1, 1)
    wf = workflow.submit(workflow.chain(a, wt.Add.s(5)))
    work(broker, queues=['high'])
    assert {n['task_id']: n['state'] for n in wf.nodes()}[a.task_id] == 'succeeded'
    work(broker, queues=['default'])
    assert wf.result() == 7


def test_a_second_success_of_a_node_changes_nothing(broker):
    """A node run twice (a worker died after its run, before the delete)
    publishes its downstream once."""
    from kale.workflow.run import _state
    a = wt.Add.s(1, 1)
    wf = workflow.submit(workflow.chain(a, wt.Add.s(1)))
    state = _state(default_app())
    ready = state.complete(a.task_id, 2, 0.0)
    assert len(ready) == 1 and ready[0]['args'] == (2, 1)
    assert state.complete(a.task_id, 2, 0.0) == []
    assert sorted(node.state for node in state.store.nodes(wf.id)) == ['queued', 'succeeded']


def test_a_refused_flow_writes_nothing(broker):
    later: list = []
    looped = wt.Total.s(later)
    later.append(workflow.ref(wt.Add.s(workflow.ref(looped))))
    with pytest.raises(InvalidFlowError, match='has a cycle through'):
        workflow.submit(looped)
    with pytest.raises(InvalidFlowError, match=r"the arguments of node \S+ cannot be "
                                               r"serialized with (pickle|json)"):
        workflow.submit(wt.Add.s(lambda: 0))
    with records.store().begin() as conn:
        assert conn.execute(workflow_nodes.select()).all() == []


def test_submit_without_records_says_what_is_missing(memory_broker):
    with pytest.raises(WorkflowError, match=r'^workflows keep their state in the task records: '
                                            r'set RECORDS_URL'):
        workflow.submit(wt.Add.s(1))


def test_two_workers_finishing_a_joins_last_inputs_at_once_publish_it_once(broker):
    """Each input's success lowers the join's missing count in its own
    transaction; only the one that brings it to zero claims the join."""
    import threading

    from kale.workflow.graph import Graph
    from kale.workflow.run import _state
    state = _state(default_app())
    for round_number in range(10):
        left, right = wt.Add.s(1), wt.Add.s(2)
        join = wt.Pair.s(workflow.ref(left), workflow.ref(right))
        graph = Graph.build(workflow.group(left, right, join), default_app().config)
        state.record('race-%d' % round_number, graph,
                     {node_id: 'default' for node_id in graph.nodes}, None, None, 0.0)
        claims: list = []
        barrier = threading.Barrier(2)

        def finish(node, value, barrier=barrier, claims=claims):
            barrier.wait()
            claims.extend(state.complete(node.task_id, value, 0.0))
        threads = [threading.Thread(target=finish, args=pair)
                   for pair in ((left, 1), (right, 2))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert [(c['task_id'], c['args']) for c in claims] == [(join.task_id, (1, 2))]


def test_a_failure_fails_downstream_and_cancels_what_only_fed_it(broker):
    a = wt.Add.s(1)
    bad = wt.Broken.s(workflow.ref(a))
    feeder = wt.Add.with_options(queue='low').s(workflow.ref(a), 5)   # feeds only the join
    join = wt.Pair.s(workflow.ref(bad), workflow.ref(feeder))
    wf = workflow.submit(workflow.group(a, bad, feeder, join))
    work(broker, queues=['default'])          # a, then bad fails for good
    assert wf.status() == 'failed'
    states = {n['task_id']: n['state'] for n in wf.nodes()}
    assert states == {a.task_id: 'succeeded', bad.task_id: 'failed', feeder.task_id: 'cancelled',
                      join.task_id: 'failed'}
    work(broker, queues=['low'])              # the feeder's task was cancelled: not run
    assert records.get(feeder.task_id).status == 'cancelled'
    with pytest.raises(WorkflowFailed, match=r'^workflow %s failed: node %s '
                                             r'\(tests\.workflow_tasks\.Broken\): non_retriable'
                                             % (wf.id, bad.task_id)):
        wf.result()


def test_cancel_stops_every_node_that_has_not_ended(broker):
    a = wt.Add.with_options(queue='low').s(1)
    wf = workflow.submit(workflow.chain(a, wt.Add.s(2)))
    workflow.cancel(wf.id)
    work(broker)
    assert wf.status() == 'cancelled'
    assert {n['state'] for n in wf.nodes()} == {'cancelled'}
    assert records.get(a.task_id).status == 'cancelled'
    with pytest.raises(WorkflowError, match=r'is cancelled, it has no result$'):
        wf.result()


def test_a_workflow_past_its_deadline_fails_its_unfinished_nodes(broker):
    import time
    a = wt.Add.with_options(queue='low').s(1)
    wf = workflow.submit(workflow.chain(a, wt.Add.s(2)), deadline_sec=0.3)
    time.sleep(0.5)
    assert wf.status() == 'failed'           # whoever looks first ends it
    assert {n['state'] for n in wf.nodes()} == {'failed'}
    assert records.get(a.task_id).status == 'cancelled'
    with pytest.raises(WorkflowFailed, match=r': deadline_exceeded$'):
        wf.result()


def test_a_node_that_ends_after_the_deadline_moves_nothing_on(broker):
    import time
    a, b = wt.Add.s(1), wt.Add.s(2)
    wf = workflow.submit(workflow.chain(a, b), deadline_sec=0.3)
    time.sleep(0.5)
    work(broker)                              # a runs; its end finds the deadline past
    states = {n['task_id']: n['state'] for n in wf.nodes()}
    assert states == {a.task_id: 'failed', b.task_id: 'failed'}
    assert workflow.get(wf.id).status() == 'failed'


def test_a_result_that_cannot_be_stored_fails_its_node(broker):
    opaque = wt.Opaque.s()
    wf = run_until_final(broker, workflow.chain(opaque, wt.Total.s()))
    assert wf.status() == 'failed'
    with pytest.raises(WorkflowFailed, match=r'the result of node %s cannot be serialized with'
                                             % opaque.task_id):
        wf.result()


def test_workflows_are_listed_newest_first_and_described_with_their_edges(broker):
    a = wt.Add.s(1, 2)
    first = run_until_final(broker, workflow.chain(a, wt.Add.s(3)), labels={'team': 'ops'})
    second = workflow.submit(workflow.chain(wt.Broken.s(1), wt.Add.s(1)))
    listed = workflow.list_workflows()
    assert [w['id'] for w in listed] == [second.id, first.id]
    assert listed[1]['status'] == 'succeeded' and listed[1]['labels'] == {'team': 'ops'}
    assert listed[1]['node_states'] == {'succeeded': 2} and listed[0]['node_count'] == 2
    assert [w['id'] for w in workflow.list_workflows(status='running')] == [second.id]
    assert [w['id'] for w in workflow.list_workflows(limit=1)] == [second.id]
    described = first.describe()
    later = next(n['task_id'] for n in described['nodes'] if n['task_id'] != a.task_id)
    assert described['edges'] == [[a.task_id, later]]
    assert {n['task_id']: n['downstream'] for n in described['nodes']}[a.task_id] == [later]
    assert described['finished_at'].endswith('Z') and described['node_count'] == 2
    with pytest.raises(WorkflowError, match='status must be one of'):
        workflow.list_workflows(status='done')
    with pytest.raises(WorkflowError, match='no workflow nope'):
        workflow.get('nope')


def _sweeper(offset, since=None):
    """A sweeper whose clock reads ``offset`` seconds from now, or from
    ``since`` (epoch seconds: a moment before the submit, so that however
    long a loaded machine took since, it sweeps as if that much later)."""
    from kale.workflow.run import WorkflowHooks
    if since is not None:
        offset += since - time.time()
    return WorkflowHooks(default_app(), clock=ShiftedClock(offset))


def test_a_sweep_publishes_a_node_whose_submitter_died_before_publishing(broker, monkeypatch):
    """A submitter that dies between its commit and its publish leaves its
    roots unpublished: a sweep publishes them once they waited the grace,
    once (a second sweep finds them claimed), and the workflow completes."""
    from kale.workflow import run
    monkeypatch.setattr(run, 'publish_nodes', lambda state, ready, app: None)
    a = wt.Add.s(1, 2)
    submitted = time.time()
    wf = workflow.submit(workflow.chain(a, wt.Add.s(3)))
    monkeypatch.undo()
    work(broker)
    assert {n['task_id']: n['state'] for n in wf.nodes()}[a.task_id] == 'queued'
    assert _sweeper(1, since=submitted).sweep() == (0, 0)      # within the grace: left alone
    sweeper = _sweeper(6)
    assert sweeper.sweep() == (1, 0)
    assert sweeper.sweep() == (0, 0)                   # claimed: not published again
    for _ in range(3):
        work(broker)
    assert wf.result() == 6
    assert {n['task_id']: n['published'] for n in wf.describe()['nodes']}[a.task_id] is True


def test_a_sweep_fails_a_workflow_past_its_deadline_with_nothing_ending(broker):
    submitted = time.time()
    wf = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(3)), deadline_sec=30)
    assert _sweeper(10, since=submitted).sweep() == (0, 0)
    assert _sweeper(31).sweep() == (0, 1)
    from kale.workflow.run import _state
    assert _state(default_app()).store.workflow(wf.id).status == 'failed'
    assert {n['reason'] for n in wf.describe()['nodes']} == {'deadline_exceeded'}


@pytest.mark.slow
def test_a_thousand_way_fan_out_into_a_chord(broker):
    header = workflow.group(*(wt.Add.s(i, 1) for i in range(1000)))
    wf = run_until_final(broker, workflow.chord(header, wt.Total.s()), rounds=5)
    assert wf.status() == 'succeeded'
    assert wf.result() == sum(range(1, 1001))
    described = wf.describe()
    assert described['node_states'] == {'succeeded': 1001} and len(described['edges']) == 1000


def test_ended_workflows_are_purged_with_their_nodes_by_the_tasks_ttls(broker):
    done = run_until_final(broker, workflow.chain(wt.Add.s(1, 2), wt.Add.s(3)))
    running = workflow.submit(wt.Add.s(5, 5))
    store = records.store()
    store.purge_expired(succeeded_ttl=3600, failed_ttl=3600)
    assert {w['id'] for w in workflow.list_workflows()} == {done.id, running.id}
    store.purge_expired(succeeded_ttl=3600, failed_ttl=3600, now=time.time() + 7200)
    assert [w['id'] for w in workflow.list_workflows()] == [running.id]
    with store.begin() as conn:
        left = {row.workflow_id for row in conn.execute(workflow_nodes.select()).all()}
    assert left == {running.id}


def test_schema_version_15_adds_the_claims_and_sweeps_a_node_left_without_one(any_records_url):
    """A store from before the publish claims: migrating adds the columns,
    once, and a node its Kale left ready but unpublished (so without a
    claim) is swept once it has waited the grace, as it was before."""
    from sqlalchemy import text

    from kale.conf import settings
    from kale.store.sql.records import RecordStore
    from kale.store.sql.schema import SCHEMA_VERSION
    store = RecordStore(any_records_url, settings.config)
    store.migrate()
    with store.begin(write=True) as conn:       # the table as version 14 had it
        for column in ('claimed_by', 'claimed_until'):
            conn.execute(text('ALTER TABLE kale_workflow_nodes DROP COLUMN %s' % column))
        conn.execute(text('UPDATE kale_schema SET version = 14'))
        conn.execute(text("INSERT INTO kale_workflow_nodes (task_id, workflow_id, task, queue, "
                          "state, missing, published, queued_at) VALUES ('old', 'wf', 't.T', "
                          "'default', 'queued', 0, 0, 100.0)"))
    store.dispose()
    for _ in range(2):                          # the second finds nothing to add
        again = RecordStore(any_records_url, settings.config)
        again.migrate()
        with again.begin() as conn:
            assert conn.execute(text('SELECT version FROM kale_schema')).scalar() == \
                SCHEMA_VERSION
        [node] = again.workflows.nodes('wf')
        assert (node.claimed_by, node.claimed_until, node.queued_at) == (None, None, 100.0)
        with again.workflows.begin() as steps:
            assert steps.stranded(104.9, 5.0, 10) == []
            assert steps.stranded(105.0, 5.0, 10) == ['old']
        again.dispose()
