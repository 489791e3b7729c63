"""A workflow's calls and results at rest: serialized with the codec's
serializer, signed (a value changed in the database is refused before it
is deserialized), sealed under the encryption key, and a large result kept
in S3 or refused with a reason that says why."""
import pytest
from sqlalchemy import select, update

from kale import records, workflow
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import WorkflowError, WorkflowFailed
from kale.store.sql.schema import workflow_nodes
from kale.transport.payloads import MemoryPayloadStore, using_payload_store
from kale.workflow.run import _state
from tests import workflow_tasks as wt
from tests.support.work import work

SECRET = 'an-encryption-secret-of-32-chars!!'


@pytest.fixture
def broker(memory_broker, any_records_url):
    return memory_broker


def _rows(wf):
    with records.store().begin() as conn:
        return {row.task_id: row for row in conn.execute(select(workflow_nodes).where(
            workflow_nodes.c.workflow_id == wf.id)).all()}


def _set(task_id, **values):
    with records.store().begin(write=True) as conn:
        conn.execute(update(workflow_nodes).where(workflow_nodes.c.task_id == task_id)
                     .values(**values))


def _drain(broker, wf, rounds=5):
    for _ in range(rounds):
        if wf.status() != 'running':
            return
        work(broker)


def test_a_call_changed_in_the_database_is_refused_before_it_is_read(broker):
    """Someone who can write to the database cannot choose what a worker
    publishes: a pending node's call, task or queue changed fails the check."""
    a, b, c = wt.Add.s(1, 2), wt.Add.s(10), wt.Add.s(20)
    wf = workflow.submit(workflow.group(workflow.chain(a, b), c))
    rows = _rows(wf)
    _set(b.task_id, task='tests.workflow_tasks.Broken')
    with pytest.raises(WorkflowError, match=r'call of node %s is not signed' % b.task_id):
        _state(default_app()).complete(a.task_id, 3, 0.0)
    _set(b.task_id, task=rows[b.task_id].task, call=rows[c.task_id].call)   # another node's
    with pytest.raises(WorkflowError, match=r'not signed'):
        _state(default_app()).complete(a.task_id, 3, 0.0)


def test_a_result_changed_in_the_database_is_refused(broker):
    a = wt.Add.s(1, 2)
    wf = workflow.submit(workflow.chain(a, wt.Add.s(3)))
    _drain(broker, wf)
    other = workflow.submit(wt.Add.s(5, 5))
    _drain(broker, other)
    _set(a.task_id, result=_rows(other)[other.nodes()[0]['task_id']].result)
    with pytest.raises(WorkflowError, match=r'result of node %s is not signed' % a.task_id):
        wf.result()


def test_results_keep_what_the_serializer_keeps(broker):
    """With pickle (the default) a tuple stays a tuple on its way downstream."""
    if settings.SERIALIZER != 'pickle':
        pytest.skip('pickle keeps tuples; JSON makes them lists')
    a = wt.Pair.s((1, 2), {'k': (3,)})
    wf = workflow.submit(workflow.chain(a, wt.Pair.s('last')))
    _drain(broker, wf)
    assert wf.result() == [[(1, 2), {'k': (3,)}], 'last']


def test_with_an_encryption_key_calls_and_results_are_sealed(broker):
    clear = 'card-4111111111111111'
    with settings.override(MESSAGE_ENCRYPTION_KEY=SECRET):
        a = wt.Add.s(clear, '!')
        wf = workflow.submit(workflow.chain(a, wt.Length.s()))
        _drain(broker, wf)
        assert wf.result() == len(clear) + 1
        rows = _rows(wf)
        assert clear not in repr(rows) and clear[-8:] not in repr(rows)
        assert rows[a.task_id].result.split(':')[4] == 'de'       # in the database, sealed


def test_a_result_over_the_limit_fails_its_node_without_a_bucket(broker):
    with settings.override(WORKFLOW_RESULT_MAX_BYTES=2048, PAYLOAD_BUCKET=''):
        blob = wt.Blob.s(5000)
        wf = workflow.submit(workflow.chain(blob, wt.Length.s()))
        _drain(broker, wf)
        assert wf.status() == 'failed'
        with pytest.raises(WorkflowFailed, match=r'result_too_large: the result of node %s is '
                                                 r'\d+ bytes serialized, over '
                                                 r'WORKFLOW_RESULT_MAX_BYTES of 2048'
                                                 % blob.task_id):
            wf.result()


def test_a_result_over_the_limit_goes_to_s3_with_a_bucket(broker):
    store = MemoryPayloadStore('results')
    with settings.override(WORKFLOW_RESULT_MAX_BYTES=2048, PAYLOAD_BUCKET='results'), \
            using_payload_store(store):
        blob = wt.Blob.s(5000)
        wf = workflow.submit(workflow.chain(blob, wt.Length.s()))
        _drain(broker, wf)
        assert wf.result() == 5000
        stored = _rows(wf)[blob.task_id].result
        assert stored.split(':')[4][0] == 's' and len(stored) < 300
        assert any(key.startswith('kale-payloads/workflows/%s/' % blob.task_id)
                   for key in store.puts)
