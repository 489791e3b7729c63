"""Workflows in the REST API of `kale web`, in-process (Starlette's test
client) on real records: the list and its pages, one workflow's nodes and
edges, cancel, retry, and the errors."""
import pytest

from kale import workflow
from kale.web import create_app
from tests import workflow_tasks as wt
from tests.support.clock import FakeClock
from tests.support.web import api_client
from tests.support.work import work

TOKEN = 't' * 32


@pytest.fixture
def client(memory_broker, records_url):
    return api_client(create_app(broker=lambda: memory_broker))


def diamond():
    """a feeds b and c, which both feed d: the flow and its nodes."""
    a = wt.Add.s(1, 2)
    b, c = wt.Add.s(workflow.ref(a), 10), wt.Add.s(workflow.ref(a), 20)
    d = wt.Pair.s(workflow.ref(b), workflow.ref(c))
    return workflow.group(a, b, c, d), (a, b, c, d)


def run_to_the_end(broker, wf):
    for _ in range(10):
        if wf.status() != 'running':
            break
        work(broker)
    return wf.status()


def every_page(client, **params):
    """Every workflow the list gives, page after page, and how many pages."""
    seen, cursor, pages = [], None, 0
    while True:
        answer = client.get('/api/workflows', params=dict(params, **(
            {'cursor': cursor} if cursor else {})))
        assert answer.status_code == 200, answer.text
        seen += answer.json()['workflows']
        pages += 1
        cursor = answer.json()['next']
        if cursor is None:
            return seen, pages


def test_the_list_is_newest_first_with_each_workflows_node_counts(client, memory_broker):
    done = workflow.submit(diamond()[0])
    assert run_to_the_end(memory_broker, done) == 'succeeded'
    waiting = workflow.submit(workflow.chain(wt.Add.s(1), wt.Add.s(2)), labels={'team': 'x'})
    answer = client.get('/api/workflows').json()
    assert [w['id'] for w in answer['workflows']] == [waiting.id, done.id]
    assert answer['next'] is None
    newest, oldest = answer['workflows']
    assert (newest['status'], newest['node_count'], newest['node_states']) == \
        ('running', 2, {'queued': 1, 'pending': 1})
    assert newest['labels'] == {'team': 'x'} and newest['created_at'].endswith('Z')
    assert (oldest['status'], oldest['node_states']) == ('succeeded', {'succeeded': 4})


def test_the_list_filters_by_status(client, memory_broker):
    done = workflow.submit(workflow.chain(wt.Add.s(1)))
    run_to_the_end(memory_broker, done)
    waiting = workflow.submit(workflow.chain(wt.Add.s(2)))

    def ids(status):
        return [w['id'] for w in client.get('/api/workflows', params={'status': status})
                .json()['workflows']]
    assert (ids('running'), ids('succeeded'), ids('failed')) == ([waiting.id], [done.id], [])


def test_pages_give_every_workflow_once_newest_first(client):
    submitted = [workflow.submit(workflow.chain(wt.Add.s(i))).id for i in range(7)]
    seen, pages = every_page(client, limit=3)
    assert [w['id'] for w in seen] == submitted[::-1] and pages == 3


@pytest.mark.parametrize('step_sec', [0.0, 0.00001], ids=['one instant', 'one millisecond'])
def test_pages_lose_and_repeat_nothing_when_many_were_created_together(client, step_sec):
    """A workflow's created_at is listed to the millisecond: workflows made in
    the same one (or at the same instant) are still each paged once."""
    clock = FakeClock()
    submitted = []
    for i in range(7):
        submitted.append(workflow.submit(workflow.chain(wt.Add.s(i)), clock=clock).id)
        clock.advance(step_sec)
    workflow.submit(workflow.chain(wt.Add.s(99)))           # now: far after the others
    seen, pages = every_page(client, limit=2)
    ids = [w['id'] for w in seen]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 8 and pages == 4
    assert set(ids[1:]) == set(submitted)
    if step_sec:
        assert ids[1:] == submitted[::-1]


def test_a_page_of_the_most_rows_still_says_whether_more_follow(client):
    """limit=1000 reads as many rows as the store gives at once: the next
    page is known another way."""
    import time

    from kale import records
    from kale.store.sql.schema import workflows
    now = time.time()
    with records.store().begin(write=True) as conn:
        conn.execute(workflows.insert(), [{'id': 'w%04d' % i, 'status': 'running',
                                           'created_at': now - i} for i in range(1001)])
    first = client.get('/api/workflows', params={'limit': 1000}).json()
    assert len(first['workflows']) == 1000 and first['next']
    rest = client.get('/api/workflows', params={'limit': 1000, 'cursor': first['next']}).json()
    assert [w['id'] for w in rest['workflows']] == ['w1000'] and rest['next'] is None


@pytest.mark.parametrize('params,reason', [
    ({'status': 'done'}, 'workflow status must be one of running, succeeded, failed, cancelled'),
    ({'limit': '0'}, 'limit must be a whole number from 1 to 1000'),
    ({'limit': 'many'}, 'limit must be a whole number from 1 to 1000'),
    ({'cursor': 'garbage'}, "cursor 'garbage' is not one this server gave out"),
    ({'cursor': 'WyIyMDI1IiwiYSIsMV0'}, 'cursor '),              # ["2025","a",1]: a bad time
])
def test_a_bad_parameter_is_a_400_naming_it_in_one_line(client, params, reason):
    answer = client.get('/api/workflows', params=params)
    assert answer.status_code == 400
    assert answer.json()['error'].startswith(reason) and '\n' not in answer.json()['error']


def test_one_workflow_has_its_nodes_and_edges(client, memory_broker):
    flow, (a, b, c, d) = diamond()
    wf = workflow.submit(flow)
    run_to_the_end(memory_broker, wf)
    answer = client.get('/api/workflows/%s' % wf.id).json()
    assert answer['id'] == wf.id and answer['status'] == 'succeeded'
    nodes = {node['task_id']: node for node in answer['nodes']}
    assert set(nodes) == {a.task_id, b.task_id, c.task_id, d.task_id}
    assert nodes[d.task_id]['task'] == 'tests.workflow_tasks.Pair'
    assert nodes[d.task_id]['upstream'] == [b.task_id, c.task_id]
    assert sorted(nodes[a.task_id]['downstream']) == sorted([b.task_id, c.task_id])
    assert {node['state'] for node in nodes.values()} == {'succeeded'}
    assert sorted(map(tuple, answer['edges'])) == sorted([
        (a.task_id, b.task_id), (a.task_id, c.task_id),
        (b.task_id, d.task_id), (c.task_id, d.task_id)])


def test_a_failed_node_is_shown_with_its_reason_and_what_it_failed(client, memory_broker):
    a = wt.Add.s(1)
    broken, after = wt.Broken.s(), wt.Add.s(1)          # a chain passes each result on
    wf = workflow.submit(workflow.chain(a, broken, after))
    assert run_to_the_end(memory_broker, wf) == 'failed'
    nodes = {n['task_id']: n for n in client.get('/api/workflows/%s' % wf.id).json()['nodes']}
    assert nodes[broken.task_id]['state'] == 'failed'
    assert 'cannot use 1' in nodes[broken.task_id]['reason']
    assert (nodes[after.task_id]['state'], nodes[after.task_id]['reason']) == \
        ('failed', 'upstream_failed')


def test_an_unknown_workflow_is_a_one_line_404(client):
    for answer in (client.get('/api/workflows/nosuch'),
                   client.post('/api/workflows/nosuch/cancel'),
                   client.post('/api/workflows/nosuch/retry')):
        assert answer.status_code == 404
        assert answer.json() == {'error': 'no workflow nosuch in the task records'}


def test_cancel_ends_a_running_workflow_and_answers_it(client, memory_broker):
    from kale import records
    first = wt.Add.s(1)
    wf = workflow.submit(workflow.chain(first, wt.Add.s(2)))
    answer = client.post('/api/workflows/%s/cancel' % wf.id)
    assert answer.status_code == 200, answer.text
    assert answer.json()['status'] == 'cancelled'
    assert {n['state'] for n in answer.json()['nodes']} == {'cancelled'}
    assert wf.status() == 'cancelled'
    assert records.get(first.task_id).status == 'cancelled', 'its published task too'
    work(memory_broker)
    assert records.get(first.task_id).status == 'cancelled', 'never run'


def test_a_workflow_that_ended_cannot_be_cancelled(client, memory_broker):
    wf = workflow.submit(workflow.chain(wt.Add.s(1)))
    run_to_the_end(memory_broker, wf)
    answer = client.post('/api/workflows/%s/cancel' % wf.id)
    assert answer.status_code == 409
    assert answer.json()['error'] == ('workflow %s is succeeded: only a running workflow can '
                                      'be cancelled' % wf.id)
    assert wf.status() == 'succeeded'


def test_retry_runs_a_failed_workflow_again_and_answers_it_running(client, memory_broker):
    from kale import records
    wt.FAILING.clear()
    wt.FAILING.add(2)
    wf = workflow.submit(workflow.chord(workflow.map(wt.Tally, [1, 2]), wt.TallyTotal.s()))
    assert run_to_the_end(memory_broker, wf) == 'failed'
    wt.FAILING.clear()
    answer = client.post('/api/workflows/%s/retry' % wf.id)
    assert answer.status_code == 200, answer.text
    assert answer.json()['status'] == 'running' and answer.json()['id'] == wf.id
    assert answer.json()['node_states'] == {'succeeded': 1, 'queued': 1, 'pending': 1}
    failed = next(n['task_id'] for n in answer.json()['nodes'] if n['state'] == 'queued')
    assert records.get(failed).status == 'queued', 'its record is written before the answer'
    assert run_to_the_end(memory_broker, wf) == 'succeeded' and wf.result() == 6


def test_retry_of_a_running_or_succeeded_workflow_is_a_one_line_409(client, memory_broker):
    wf = workflow.submit(workflow.chain(wt.Add.s(1)))
    answer = client.post('/api/workflows/%s/retry' % wf.id)
    assert answer.status_code == 409
    assert answer.json() == {'error': 'workflow %s cannot be retried: it is running (only a '
                                      'failed or cancelled one can be)' % wf.id}
    run_to_the_end(memory_broker, wf)
    answer = client.post('/api/workflows/%s/retry' % wf.id)
    assert answer.status_code == 409 and 'it is succeeded' in answer.json()['error']


def test_with_a_token_every_workflow_route_needs_it(memory_broker, records_url):
    wf = workflow.submit(workflow.chain(wt.Add.s(1)))
    client = api_client(create_app(token=TOKEN, broker=lambda: memory_broker))
    bearer = {'Authorization': 'Bearer ' + TOKEN}
    assert client.get('/api/workflows').status_code == 401
    assert client.get('/api/workflows/%s' % wf.id).status_code == 401
    assert client.post('/api/workflows/%s/cancel' % wf.id).status_code == 401
    assert wf.status() == 'running'
    assert client.get('/api/workflows', headers=bearer).status_code == 200
    assert client.post('/api/workflows/%s/cancel' % wf.id, headers=bearer).status_code == 200
    assert wf.status() == 'cancelled'
    assert client.post('/api/workflows/%s/retry' % wf.id).status_code == 401
    assert wf.status() == 'cancelled'
    assert client.post('/api/workflows/%s/retry' % wf.id, headers=bearer).status_code == 200
    assert wf.status() == 'running'


def test_cancel_from_another_site_is_refused(memory_broker, records_url):
    from starlette.testclient import TestClient
    wf = workflow.submit(workflow.chain(wt.Add.s(1)))
    client = TestClient(create_app(broker=lambda: memory_broker), base_url='http://127.0.0.1')
    assert client.post('/api/workflows/%s/cancel' % wf.id).status_code == 403
    assert wf.status() == 'running'
    workflow.cancel(wf.id)
    assert client.post('/api/workflows/%s/retry' % wf.id).status_code == 403
    assert wf.status() == 'cancelled'


def test_without_records_the_workflow_routes_answer_as_the_task_routes_do(memory_broker,
                                                                          monkeypatch, settings_env):
    from kale.conf import settings
    monkeypatch.delenv('KALE_TEST_RECORDS_URL', raising=False)
    settings_env()
    assert not settings.RECORDS_URL
    client = api_client(create_app(broker=lambda: memory_broker))
    tasks = client.get('/api/tasks')
    assert tasks.status_code == 400 and 'task records are off' in tasks.json()['error']
    for answer in (client.get('/api/workflows'), client.get('/api/workflows/x'),
                   client.post('/api/workflows/x/cancel'), client.post('/api/workflows/x/retry')):
        assert (answer.status_code, answer.json()) == (tasks.status_code, tasks.json())


def test_the_workflow_routes_are_documented(client):
    paths = client.get('/api/openapi.json').json()['paths']
    assert set(paths['/api/workflows']) == {'get', 'post'}
    assert set(paths['/api/workflows/{workflow_id}']) == {'get'}
    assert set(paths['/api/workflows/{workflow_id}/cancel']) == {'post'}
    retry = paths['/api/workflows/{workflow_id}/retry']
    assert set(retry) == {'post'} and set(retry['post']['responses']) >= {'200', '404', '409'}
