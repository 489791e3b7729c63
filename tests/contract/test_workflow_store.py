"""The workflows' facet's contract (kale.store.workflows.WorkflowStore), on
every store: a workflow and its nodes kept as given; a queued node succeeds
once; an arrival lowers a count and claims the node at zero, once however
many race; nodes end only from pending or queued; a workflow finishes only
while running; a node is claimed for its publish when it becomes ready, its
claim renewed only by its owner and only while unpublished, and a sweep
takes over only a claim that lapsed, once however many race; listings
newest first with counts by state."""
from __future__ import annotations

import threading

from kale.statuses import NodeStatus, WorkflowStatus
from kale.store.workflows import Claim, Node, WorkflowRow

QUEUED, PENDING = NodeStatus.QUEUED, NodeStatus.PENDING


#: A claim that never lapses in these tests, for those not about claims.
LASTING = Claim('someone', 1e12)


def chord(store, workflow_id='wf1', created_at=1.0, deadline_at=None, claim=None):
    """a and b feed c (a and b claimed by ``claim``, if given)."""
    owner, until = (claim.owner, claim.until) if claim is not None else (None, None)
    nodes = [Node('%s-a' % workflow_id, workflow_id, 't.A', 'default', QUEUED, 0, [],
                  ['%s-c' % workflow_id], 'call-a', queued_at=created_at, claimed_by=owner,
                  claimed_until=until),
             Node('%s-b' % workflow_id, workflow_id, 't.B', 'default', QUEUED, 0, [],
                  ['%s-c' % workflow_id], 'call-b', queued_at=created_at, claimed_by=owner,
                  claimed_until=until),
             Node('%s-c' % workflow_id, workflow_id, 't.C', 'low', PENDING, 2,
                  ['%s-a' % workflow_id, '%s-b' % workflow_id], [], 'call-c')]
    row = WorkflowRow(workflow_id, WorkflowStatus.RUNNING, {'team': 'x'}, {'m': 1}, created_at,
                      deadline_at)
    with store.workflows.begin(write=True) as steps:
        steps.add(row, nodes)
    return row, nodes


def test_a_workflow_and_its_nodes_are_kept_as_given(store):
    row, nodes = chord(store)
    assert store.workflows.workflow('wf1') == row
    assert sorted(store.workflows.nodes('wf1'), key=lambda n: n.task_id) == nodes
    assert store.workflows.workflow('missing') is None and store.workflows.nodes('missing') == []


def test_a_queued_node_succeeds_once_and_the_last_arrival_claims_its_successor(store):
    chord(store)
    with store.workflows.begin(write=True) as steps:
        assert steps.deadlines(['wf1-a', 'wf1-b']) == [('wf1', None)]
        assert steps.succeed('wf1-a', 'result-a') == ('wf1', ['wf1-c'])
        assert steps.succeed('wf1-a', 'again') is None          # not queued any more
        assert steps.arrive('wf1-c', 1, 5.0, Claim('w1', 10.0)) == (1, PENDING)
        assert steps.node('wf1-c').claimed_by is None               # not ready: no claim
        assert steps.succeed('wf1-b', 'result-b') == ('wf1', ['wf1-c'])
        assert steps.arrive('wf1-c', 1, 6.0, Claim('w2', 11.0)) == (0, QUEUED)
        c = steps.node('wf1-c')
        assert (c.queued_at, c.claimed_by, c.claimed_until) == (6.0, 'w2', 11.0)
        assert steps.results(['wf1-a', 'wf1-b']) == {'wf1-a': 'result-a', 'wf1-b': 'result-b'}
        assert not steps.all_succeeded('wf1')
        assert steps.succeed('wf1-c', 'result-c') == ('wf1', [])
        assert steps.all_succeeded('wf1')
        steps.finish('wf1', WorkflowStatus.SUCCEEDED, 7.0)
        steps.finish('wf1', WorkflowStatus.FAILED, 8.0)          # only while running
    found = store.workflows.workflow('wf1')
    assert (found.status, found.finished_at) == (WorkflowStatus.SUCCEEDED, 7.0)


def test_a_batch_of_queued_nodes_succeeds_in_one_step_and_others_stay_as_they_are(store):
    chord(store)
    chord(store, 'wf2')
    with store.workflows.begin(write=True) as steps:
        steps.end_node('wf2-b', NodeStatus.CANCELLED, 'workflow cancelled')
        assert steps.succeed_many([('wf1-a', 'result-a'), ('wf1-b', 'result-b'),
                                   ('wf2-a', 'result-2a'), ('wf2-b', 'cancelled'),
                                   ('wf1-c', 'pending'), ('missing', 'none')]) == {
            'wf1-a': ('wf1', ['wf1-c']), 'wf1-b': ('wf1', ['wf1-c']),
            'wf2-a': ('wf2', ['wf2-c'])}
        assert steps.succeed_many([('wf1-a', 'again')]) == {}       # not queued any more
        assert steps.results(['wf1-a', 'wf1-b', 'wf2-a', 'wf2-b', 'wf1-c']) == {
            'wf1-a': 'result-a', 'wf1-b': 'result-b', 'wf2-a': 'result-2a', 'wf2-b': None,
            'wf1-c': None}
    states = {node.task_id: node.state for node in store.workflows.nodes('wf2')}
    assert states == {'wf2-a': NodeStatus.SUCCEEDED, 'wf2-b': NodeStatus.CANCELLED,
                      'wf2-c': PENDING}


def test_racing_arrivals_claim_a_node_once(store):
    width = 8
    nodes = [Node('n%d' % i, 'wf', 't.A', 'default', QUEUED, 0, [], ['join'], 'call')
             for i in range(width)]
    nodes.append(Node('join', 'wf', 't.J', 'default', PENDING, width,
                      ['n%d' % i for i in range(width)], [], 'call'))
    with store.workflows.begin(write=True) as steps:
        steps.add(WorkflowRow('wf', WorkflowStatus.RUNNING, None, None, 1.0), nodes)
    claims = []

    def arrive() -> None:
        with store.workflows.begin(write=True) as steps:
            claims.append(steps.arrive('join', 1, 2.0, LASTING))

    threads = [threading.Thread(target=arrive) for _ in range(width)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(missing for missing, _ in claims) == list(range(width))
    assert [state for missing, state in claims if state == QUEUED] == [QUEUED]


def test_nodes_end_only_from_pending_or_queued(store):
    chord(store)
    with store.workflows.begin(write=True) as steps:
        steps.succeed('wf1-a', 'result')
        assert steps.fail_queued('wf1-b', 'boom') == 'wf1'
        assert steps.fail_queued('wf1-b', 'again') is None
        steps.end_node('wf1-a', NodeStatus.CANCELLED, 'no')      # succeeded: stays
        steps.end_node('wf1-c', NodeStatus.FAILED, 'upstream_failed')
        assert steps.status('wf1') == (WorkflowStatus.RUNNING, None)
        steps.finish('wf1', WorkflowStatus.FAILED, 9.0)
    states = {n.task_id: (n.state, n.reason) for n in store.workflows.nodes('wf1')}
    assert states == {'wf1-a': (NodeStatus.SUCCEEDED, None), 'wf1-b': (NodeStatus.FAILED, 'boom'),
                      'wf1-c': (NodeStatus.FAILED, 'upstream_failed')}
    assert store.workflows.workflow('wf1').status == WorkflowStatus.FAILED


def test_a_write_that_raises_changes_nothing(store):
    chord(store)
    try:
        with store.workflows.begin(write=True) as steps:
            steps.succeed('wf1-a', 'result')
            raise RuntimeError('the caller fails')
    except RuntimeError:
        pass
    assert {n.task_id: n.state for n in store.workflows.nodes('wf1')}['wf1-a'] == QUEUED


def test_a_claimed_node_is_stranded_only_once_its_claim_lapsed(store):
    """Ready long past the grace, a node whose publisher renews its claim
    is not stranded; once the claim lapsed, one sweep takes it over."""
    chord(store, created_at=1.0, claim=Claim('submitter', 10.0))
    with store.workflows.begin() as steps:
        assert steps.stranded(9.0, 5.0, 10) == []             # queued 8 s ago: still claimed
    assert sorted(store.workflows.renew_claims(['wf1-a', 'wf1-b'], 'submitter', 20.0)) == \
        ['wf1-a', 'wf1-b']
    assert store.workflows.renew_claims(['wf1-a'], 'another', 99.0) == []     # not its own
    with store.workflows.begin() as steps:
        assert steps.stranded(15.0, 5.0, 10) == []
    store.workflows.mark_published(['wf1-b'])
    assert sorted(store.workflows.renew_claims(['wf1-a', 'wf1-b'], 'submitter', 30.0)) == \
        ['wf1-a', 'wf1-b']                                  # still its own, published or not
    with store.workflows.begin() as steps:
        assert steps.stranded(29.9, 5.0, 10) == []
        assert steps.stranded(30.0, 5.0, 10) == ['wf1-a']     # lapsed; b was published
    with store.workflows.begin(write=True) as steps:
        assert not steps.claim_stranded('wf1-a', 29.0, 5.0, Claim('sweeper', 35.0))
        assert steps.claim_stranded('wf1-a', 30.0, 5.0, Claim('sweeper', 35.0))
        assert not steps.claim_stranded('wf1-a', 31.0, 5.0, Claim('other', 36.0))
        assert steps.stranded(34.0, 5.0, 10) == []
    assert store.workflows.renew_claims(['wf1-a'], 'submitter', 40.0) == []   # lost
    node = {n.task_id: n for n in store.workflows.nodes('wf1')}['wf1-a']
    assert (node.claimed_by, node.claimed_until, node.published) == ('sweeper', 35.0, 0)
    assert store.workflows.renew_claims(['wf1-a'], 'sweeper', 32.0) == ['wf1-a']  # released
    with store.workflows.begin() as steps:
        assert steps.stranded(32.0, 5.0, 10) == ['wf1-a']
    assert store.workflows.renew_claims([], 'sweeper', 50.0) == []


def test_a_node_without_a_claim_is_stranded_after_the_grace(store):
    """Nodes left unpublished by a Kale from before claims: swept as before."""
    chord(store, created_at=10.0)
    store.workflows.mark_published(['wf1-b'])
    with store.workflows.begin() as steps:
        assert steps.stranded(14.9, 5.0, 10) == []
        assert steps.stranded(15.0, 5.0, 10) == ['wf1-a']
    with store.workflows.begin(write=True) as steps:
        assert steps.claim_stranded('wf1-a', 15.0, 5.0, Claim('sweeper', 20.0))
        assert not steps.claim_stranded('wf1-a', 16.0, 5.0, Claim('other', 21.0))
        assert steps.stranded(19.0, 5.0, 10) == []


def test_racing_sweeps_take_over_a_lapsed_claim_once(store):
    chord(store, claim=Claim('dead', 5.0))
    taken = []

    def sweep(number: int) -> None:
        with store.workflows.begin(write=True) as steps:
            taken.append((number, steps.claim_stranded('wf1-a', 6.0, 5.0,
                                                       Claim('s%d' % number, 11.0))))

    threads = [threading.Thread(target=sweep, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = ['s%d' % number for number, won in taken if won]
    assert len(taken) == 8 and len(winners) == 1
    assert {n.task_id: n.claimed_by for n in store.workflows.nodes('wf1')}['wf1-a'] == winners[0]


def test_overdue_and_listings(store):
    chord(store, 'old', created_at=1.0, deadline_at=5.0)
    chord(store, 'new', created_at=2.0)
    assert store.workflows.overdue(6.0) == ['old'] and store.workflows.overdue(4.0) == []
    with store.workflows.begin(write=True) as steps:
        steps.finish('new', WorkflowStatus.CANCELLED, 3.0)
    listed = store.workflows.workflows()
    assert [(row.id, counts) for row, counts in listed] == [
        ('new', {'queued': 2, 'pending': 1}), ('old', {'queued': 2, 'pending': 1})]
    assert [row.id for row, _ in store.workflows.workflows(status='running')] == ['old']
    assert [row.id for row, _ in store.workflows.workflows(before=2.0)] == ['old']
    assert [row.id for row, _ in store.workflows.workflows(limit=1)] == ['new']
    assert store.workflows.overdue(6.0) == ['old']


def test_a_cancelled_node_that_ran_succeeds_and_nothing_moves_on(store):
    chord(store)
    with store.workflows.begin(write=True) as steps:
        steps.end_node('wf1-a', NodeStatus.CANCELLED, 'not needed')
        steps.end_node('wf1-b', NodeStatus.FAILED, 'boom')
        assert steps.succeed('wf1-a', 'late') is None               # not queued
        assert steps.succeed_cancelled('wf1-a', 'late')
        assert not steps.succeed_cancelled('wf1-a', 'again')        # succeeded now
        assert not steps.succeed_cancelled('wf1-b', 'failed ones')  # only from cancelled
    nodes = {n.task_id: n for n in store.workflows.nodes('wf1')}
    assert (nodes['wf1-a'].state, nodes['wf1-a'].result, nodes['wf1-a'].reason) == \
        (NodeStatus.SUCCEEDED, 'late', None)
    assert nodes['wf1-b'].state == NodeStatus.FAILED and nodes['wf1-c'].missing == 2


def test_a_failed_or_cancelled_workflow_reopens_once_and_its_nodes_reset(store):
    chord(store, deadline_at=5.0)
    with store.workflows.begin(write=True) as steps:
        assert not steps.reopen('wf1', 50.0)                       # running: no
        steps.succeed('wf1-a', 'result-a')
        steps.fail_queued('wf1-b', 'boom')
        steps.end_node('wf1-c', NodeStatus.FAILED, 'upstream_failed')
        steps.finish('wf1', WorkflowStatus.FAILED, 9.0)
    store.workflows.mark_published(['wf1-b'])
    with store.workflows.begin(write=True) as steps:
        assert [n.task_id for n in steps.nodes('wf1', lock=True)] == ['wf1-a', 'wf1-b', 'wf1-c']
        assert steps.reopen('wf1', 50.0)
        assert not steps.reopen('wf1', 60.0)                       # once
        steps.reset_node('wf1-b', QUEUED, 0, 10.0, Claim('retrier', 15.0))
        steps.reset_node('wf1-c', PENDING, 1, 10.0, Claim('retrier', 15.0))
    found = store.workflows.workflow('wf1')
    assert (found.status, found.deadline_at, found.finished_at) == \
        (WorkflowStatus.RUNNING, 50.0, None)
    nodes = {n.task_id: n for n in store.workflows.nodes('wf1')}
    assert (nodes['wf1-a'].state, nodes['wf1-a'].result) == (NodeStatus.SUCCEEDED, 'result-a')
    b, c = nodes['wf1-b'], nodes['wf1-c']
    assert (b.state, b.missing, b.reason, b.published, b.queued_at, b.claimed_by,
            b.claimed_until) == (QUEUED, 0, None, 0, 10.0, 'retrier', 15.0)
    assert (c.state, c.missing, c.reason, c.queued_at, c.claimed_by, c.claimed_until) == \
        (PENDING, 1, None, None, None, None)
    with store.workflows.begin() as steps:
        assert steps.stranded(14.0, 5.0, 10) == []                 # its retrier's, for now
        assert steps.stranded(15.0, 5.0, 10) == ['wf1-b']          # the sweep's, once lapsed
    with store.workflows.begin(write=True) as steps:
        steps.finish('wf1', WorkflowStatus.CANCELLED, 11.0)
        assert steps.reopen('wf1', None)                           # cancelled: yes
