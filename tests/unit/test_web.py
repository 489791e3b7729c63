"""The REST API of `kale web`, in-process (Starlette's test client) on real
records: filters, keyset pages, counts, summaries, deletes, retry and
cancel, workers, queues, errors, the token and the OpenAPI schema."""
import time

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from kale import records
from kale.web import create_app
from tests import records_tasks as rt
from tests.support.web import api_client
from tests.support.work import work


@pytest.fixture
def client(memory_broker, records_url):
    return api_client(create_app(broker=lambda: memory_broker))


def publish_some(n=5, **labels):
    ids = rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(n)], labels=labels or None)
    records.get(ids[0])                 # written
    return ids


def test_list_pages_through_every_task_newest_first_without_inputs(client):
    ids = publish_some(7)
    seen, cursor = [], None
    while True:
        params = {'limit': 3, 'cursor': cursor} if cursor else {'limit': 3}
        answer = client.get('/api/tasks', params=params).json()
        seen += answer['tasks']
        cursor = answer['next']
        if cursor is None:
            break
    assert sorted(t['id'] for t in seen) == sorted(ids)
    assert [t['published_at'] for t in seen] == sorted((t['published_at'] for t in seen), reverse=True)
    assert 'inputs' not in seen[0] and 'result' not in seen[0]


def test_filters_by_status_label_task_and_queue(client, memory_broker):
    publish_some(3, tenant='t1')
    publish_some(2, tenant='t2')
    failed = rt.BrokenTask.publish(None, labels={'tenant': 't2'})
    work(memory_broker)
    def count(**params):
        return client.get('/api/tasks/count', params=params).json()['count']
    assert count(**{'label.tenant': 't1'}) == 3
    assert count(status='failed') == 1 and count(status='failed', **{'label.tenant': 't1'}) == 0
    assert count(task='BrokenTask') == 1 and count(task='tests.records_tasks.PlainTask') == 5
    assert count(queue='default') == 6 and count(status='pending') == 0
    assert client.get('/api/tasks', params={'status': 'failed'}).json()['tasks'][0]['id'] == failed


def test_summary_counts_by_status_task_and_queue(client, memory_broker):
    publish_some(2)
    rt.BrokenTask.publish(None)
    work(memory_broker)
    summary = client.get('/api/tasks/summary').json()
    assert summary['by_status']['succeeded'] == 2 and summary['by_status']['failed'] == 1
    assert summary['by_task']['tests.records_tasks.BrokenTask'] == {'failed': 1}
    assert summary['by_queue']['default'] == {'succeeded': 2, 'failed': 1}


def test_an_unchanged_summary_or_timeline_is_a_304_and_a_changed_one_a_200(client,
                                                                          memory_broker):
    publish_some(2)
    paths = ('/api/tasks/summary', '/api/timeline?window=auto')
    etags = {path: client.get(path).headers['etag'] for path in paths}
    for path, etag in etags.items():
        again = client.get(path, headers={'If-None-Match': etag})
        assert (again.status_code, again.content, again.headers['etag']) == (304, b'', etag)
    work(memory_broker)                  # the tasks succeed: both answers change
    for path, etag in etags.items():
        changed = client.get(path, headers={'If-None-Match': etag})
        assert changed.status_code == 200 and changed.json() and changed.headers['etag'] != etag
    summary = client.get('/api/tasks/summary')
    assert client.get('/api/tasks/summary', headers={
        'If-None-Match': 'W/"other", ' + summary.headers['etag']}).status_code == 304


def test_one_task_has_its_inputs_and_an_unknown_one_is_a_json_404(client):
    [task_id] = publish_some(1)
    assert client.get('/api/tasks/%s' % task_id).json()['inputs'] == \
        {'args': [0], 'kwargs': {}, 'exact': True}
    answer = client.get('/api/tasks/nop')
    assert answer.status_code == 404 and answer.json() == {'error': 'no record of task nop'}
    answer = client.get('/api/tasks/nope')
    assert answer.status_code == 404 and answer.json() == {
        'error': 'no record of task nope, nor of one whose id starts with it'}


@pytest.mark.parametrize('params,reason', [
    ({'status': 'done'}, "unknown status 'done'"),
    ({'limit': '5000'}, 'limit must be a whole number from 1 to 1000'),
    ({'cursor': 'garbage'}, "cursor 'garbage' is not one this server gave out"),
    ({'since': 'yesterday'}, 'since must be epoch seconds or an ISO 8601 time'),
    ({'colour': 'red'}, "unknown filter 'colour'"),
])
def test_bad_input_is_a_400_with_a_one_line_reason(client, params, reason):
    answer = client.get('/api/tasks', params=params)
    assert answer.status_code == 400
    assert answer.json()['error'].startswith(reason) and '\n' not in answer.json()['error']


def test_delete_needs_a_filter_or_all(client):
    publish_some(3, tenant='gone')
    publish_some(2)
    assert client.delete('/api/tasks').status_code == 400
    assert client.delete('/api/tasks', params={'label.tenant': 'gone'}).json() == {'deleted': 3}
    assert client.delete('/api/tasks', params={'all': 'true'}).json() == {'deleted': 2}


def test_retry_and_cancel(client, memory_broker):
    failed = rt.BrokenTask.publish(None)
    work(memory_broker)
    retried = client.post('/api/tasks/%s/retry' % failed).json()
    assert retried['retry_of'] == failed
    assert records.store().get(retried['id'])['status'] == 'queued', 'written before the answer'
    assert client.post('/api/tasks/%s/cancel' % retried['id']).json()['status'] == 'cancelled'
    again = client.post('/api/tasks/%s/cancel' % retried['id'])
    assert again.status_code == 409 and 'it is cancelled' in again.json()['error']


def test_workers_by_state_a_silent_one_is_lost(client, memory_broker):
    publish_some(1)
    work(memory_broker)
    store = records.store()
    now = time.time()
    store.write([], [], [{'id': 'h:1:1', 'role': 'worker', 'host': 'h', 'pid': 1, 'queues': [],
                          'version': 'x', 'started_at': now - 100, 'heartbeat_at': now - 60,
                          'heartbeat_sec': 10, 'stopped_at': None, 'current_task': None,
                          'current_task_name': None, 'counts': {}}])
    states = {w['id']: w['state'] for w in client.get('/api/workers').json()['workers']}
    assert states['h:1:1'] == 'lost' and 'stopped' in states.values()
    assert [w['id'] for w in client.get('/api/workers?state=lost').json()['workers']] == ['h:1:1']
    assert client.get('/api/workers?state=asleep').status_code == 400


def test_queues_have_their_counts(client):
    publish_some(4)
    queues = {q['name']: q for q in client.get('/api/queues').json()['queues']}
    assert queues['default']['visible'] == 4
    assert set(queues['default']) >= {'name', 'priority', 'visible', 'in_flight', 'delayed',
                                      'dead_letters'}


def test_a_token_is_required_when_one_is_set(memory_broker, records_url):
    client = api_client(create_app(token='s' * 32, broker=lambda: memory_broker))
    assert client.get('/api/tasks').status_code == 401
    assert client.get('/api/tasks', headers={'Authorization': 'Bearer ' + 's' * 32}).status_code == 200
    assert client.get('/').status_code == 200            # the page holds no data


def test_the_openapi_schema_is_served(client):
    schema = client.get('/api/openapi.json').json()
    assert '/api/tasks/{task_id}/retry' in schema['paths']


def test_every_api_route_is_in_the_openapi_document_and_nothing_else(memory_broker, records_url):
    import re

    from starlette.routing import Route
    app = create_app(broker=lambda: memory_broker)
    served = {(route.path, method.lower()) for route in app.routes if isinstance(route, Route)
              and route.path.startswith('/api/') and route.path != '/api/openapi.json'
              for method in route.methods if method != 'HEAD'}
    paths = api_client(app).get('/api/openapi.json').json()['paths']
    documented = {(path, method) for path, operations in paths.items() for method in operations}
    assert served == documented and len(served) >= 13
    for path, method in documented:
        operation = paths[path][method]
        assert operation['summary'] and '200' in operation['responses']
        in_path = {p['name'] for p in operation.get('parameters', []) if p['in'] == 'path'}
        assert in_path == set(re.findall(r'{(\w+)}', path)), (path, method)
    for path, method in documented:          # each answers as its route (not 404/405)
        url = path.replace('{task_id}', 'nosuch').replace('{name}', 'default')
        answer = api_client(app).request(method.upper(), url)
        assert answer.status_code != 405, (method, url)
        assert not answer.json().get('error', '').startswith('no route'), (method, url)


def test_the_app_mounts_inside_another_asgi_app(memory_broker, records_url):
    outer = Starlette(routes=[Mount('/kale', app=create_app(broker=lambda: memory_broker))])
    client = api_client(outer)
    assert client.get('/kale/api/tasks/count').json() == {'count': 0}
    assert 'Kale dashboard' in client.get('/kale/').text


def test_redrive_moves_the_dead_letters_back(client, memory_broker):
    rt.BrokenTask.publish(None)
    work(memory_broker)

    def default_queue():
        return {q['name']: q for q in client.get('/api/queues').json()['queues']}['default']
    assert (default_queue()['dead_letters'], default_queue()['visible']) == (1, 0)
    assert client.post('/api/queues/default/redrive').json()['moved'] == 1
    assert (default_queue()['dead_letters'], default_queue()['visible']) == (0, 1)


def test_redrive_of_an_unknown_queue_is_a_one_line_json_error(client):
    answer = client.post('/api/queues/nosuchqueue/redrive')
    assert answer.status_code in (400, 404)
    assert 'nosuchqueue' in answer.json()['error'] and '\n' not in answer.json()['error']


@pytest.mark.parametrize('token, reason', [('', r'set a bearer token in \$KALE_WEB_TOKEN'),
                                           ('short', 'at least 16 characters')])
def test_beyond_loopback_the_server_refuses_to_start_without_a_real_token(
        records_url, monkeypatch, token, reason):
    from kale.exceptions import ImproperlyConfigured
    from kale.web import server
    monkeypatch.delenv(server.TOKEN_VARIABLE, raising=False)
    monkeypatch.setattr(server, 'listening_socket', lambda host, port: pytest.fail('it listened'))
    with pytest.raises(ImproperlyConfigured, match=reason):
        server.serve('0.0.0.0', 0, token=token or None)
    for host in ('127.0.0.1', '::1', 'localhost'):
        server.check_exposure(host, '')          # loopback: no token needed


def test_since_and_until_filter_by_publish_time(client):
    import datetime
    early = publish_some(2)
    cut = max(records.get(task_id).published_at for task_id in early) + 0.001
    while time.time() <= cut:
        time.sleep(0.001)
    publish_some(3)

    def count(**params):
        return client.get('/api/tasks/count', params=params).json()['count']
    assert (count(until=cut), count(since=cut), count(since=cut, until=cut + 3600)) == (2, 3, 3)
    iso = datetime.datetime.fromtimestamp(cut, datetime.timezone.utc).isoformat()
    assert count(since=iso) == 3


def test_a_store_that_cannot_be_reached_is_a_503_with_one_line(memory_broker, records_url):
    unreachable = 'sqlite:////nonexistent-kale-dir/records.db'
    client = api_client(create_app(records_url=unreachable, broker=lambda: memory_broker))
    answer = client.get('/api/tasks/count')
    assert answer.status_code == 503
    assert 'records store' in answer.json()['error'] and '\n' not in answer.json()['error']
