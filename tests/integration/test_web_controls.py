"""The control routes of `kale web`, in-process on real records: pause and
resume a queue (the queues list says since when), ask a worker to stop (the
workers list says when), with the errors and the protection every
state-changing route has."""
import time

import pytest
from starlette.testclient import TestClient

from kale import records
from kale.web import create_app
from tests.support.web import api_client

TOKEN = 't' * 32


@pytest.fixture
def client(memory_broker, records_url):
    return api_client(create_app(broker=lambda: memory_broker))


def worker_row(worker_id, stopped=False):
    now = time.time()
    return {'id': worker_id, 'role': 'worker', 'host': 'h', 'pid': 1, 'queues': ['default'],
            'version': '0', 'started_at': now - 60, 'heartbeat_at': now, 'heartbeat_sec': 10.0,
            'stopped_at': now if stopped else None, 'counts': {}}


def test_a_queue_is_paused_and_resumed_and_the_queues_list_says_so(client):
    answer = client.post('/api/queues/default/pause')
    assert answer.status_code == 200, answer.text
    assert answer.json()['paused'] is True and answer.json()['paused_at'].endswith('Z')
    again = client.post('/api/queues/default/pause').json()
    assert again['paused_at'] == answer.json()['paused_at']
    rows = {row['name']: row for row in client.get('/api/queues').json()['queues']}
    assert rows['default']['paused_at'] == answer.json()['paused_at']
    assert rows['low']['paused_at'] is None
    assert records.store().controls.paused().keys() == {'default'}
    assert client.post('/api/queues/default/resume').json() == {
        'queue': 'default', 'paused': False, 'was_paused': True}
    assert client.post('/api/queues/default/resume').json()['was_paused'] is False
    assert client.get('/api/queues').json()['queues'][0]['paused_at'] is None


def test_pausing_a_queue_the_config_does_not_have_is_refused(client):
    answer = client.post('/api/queues/nowhere/pause')
    assert answer.status_code == 400 and "'nowhere'" in answer.json()['error']
    assert records.store().controls.paused() == {}


def test_a_stop_is_asked_of_a_running_worker_by_its_id_or_a_unique_prefix(client):
    records.store().write([], [], [worker_row('h:1@a'), worker_row('h:22@b'),
                                   worker_row('h:3@c', stopped=True)])
    answer = client.post('/api/workers/h:1@a/stop')
    assert answer.status_code == 200, answer.text
    assert answer.json()['id'] == 'h:1@a' and answer.json()['stop_requested_at']
    assert client.post('/api/workers/h:22/stop').json()['id'] == 'h:22@b'
    listed = {w['id']: w['stop_requested_at'] for w in client.get('/api/workers').json()['workers']}
    assert listed['h:1@a'] == answer.json()['stop_requested_at'] and listed['h:22@b']
    assert listed['h:3@c'] is None


@pytest.mark.parametrize('given, status, said', [
    ('h:3@c', 409, 'stopped at'), ('nobody', 404, 'no worker recorded as nobody'),
    ('h:', 409, '2 workers have ids that start with h:')])
def test_a_stop_of_a_stopped_unknown_or_ambiguous_worker_is_refused(client, given, status, said):
    records.store().write([], [], [worker_row('h:1@a'), worker_row('h:2@b'),
                                   worker_row('h:3@c', stopped=True)])
    answer = client.post('/api/workers/%s/stop' % given)
    assert answer.status_code == status and said in answer.json()['error'], answer.text
    assert records.store().controls.stops() == {}


@pytest.mark.parametrize('path', ['/api/queues/default/pause', '/api/queues/default/resume',
                                  '/api/workers/h:1@a/stop'])
def test_the_control_routes_need_the_anti_csrf_header_and_the_token(memory_broker, records_url,
                                                                    path):
    records.store().write([], [], [worker_row('h:1@a')])
    bare = TestClient(create_app(broker=lambda: memory_broker), base_url='http://127.0.0.1')
    assert bare.post(path).status_code == 403
    guarded = create_app(token=TOKEN, broker=lambda: memory_broker)
    assert api_client(guarded).post(path).status_code == 401
    assert api_client(guarded, Authorization='Bearer ' + TOKEN).post(path).status_code == 200
