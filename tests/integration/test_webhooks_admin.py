"""Managing webhooks: ``kale webhooks add|list|disable|enable|test|remove``
and ``/api/webhooks`` (with and without a token), on task records in SQLite.
The deliveries themselves: test_webhooks.py."""
from __future__ import annotations

import json

import pytest

from kale import records, webhooks
from kale.cli import main
from kale.conf import settings
from kale.web import create_app
from kale.webhooks.delivery import DeliverWebhook
from tests.support.web import api_client

TOKEN = 'webhooks-test-token-0123456789'
URL = 'http://127.0.0.1:9/hook'


@pytest.fixture
def allowed(memory_broker, records_url):
    with settings.override(WEBHOOK_ALLOWED_HOSTS=('127.0.0.1',)):
        yield memory_broker


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_commands_add_list_disable_enable_test_and_remove(allowed, capsys):
    code, out, _ = run(capsys, 'webhooks', 'add', 'orders', URL, '--method', 'put',
                       '--header', 'Authorization: Bearer abc', '--label', 'tenant=t1')
    assert code == 0
    hook_id = out.split()[1]
    secret = out.split('secret: ')[1].split()[0]
    assert hook_id.startswith('wh_') and secret.startswith('whsec_')
    assert webhooks.get(hook_id).secret == secret
    assert 'shown only now' in out

    code, out, _ = run(capsys, 'webhooks', 'list', '--json')
    [listed] = json.loads(out)
    assert listed['id'] == hook_id and listed['method'] == 'PUT' and listed['active'] is True
    assert listed['headers'] == {'Authorization': '(hidden)'}
    assert listed['labels'] == {'tenant': 't1'} and 'secret' not in listed
    assert secret not in out and 'Bearer abc' not in out
    code, out, _ = run(capsys, 'webhooks', 'list')
    assert hook_id in out and 'tenant=t1' in out and secret not in out

    assert run(capsys, 'webhooks', 'disable', hook_id)[1] == 'webhook %s disabled\n' % hook_id
    code, _, err = run(capsys, 'webhooks', 'test', hook_id)
    assert code == 1 and 'is disabled: enable it first' in err
    assert 'no' in run(capsys, 'webhooks', 'list', '--topic', 'orders')[1].splitlines()[1]
    assert run(capsys, 'webhooks', 'enable', hook_id, '--json')[0] == 0
    assert webhooks.get(hook_id).active

    code, out, _ = run(capsys, 'webhooks', 'test', hook_id, '--json')
    task_id = json.loads(out)['task_id']
    record = records.get(task_id)
    assert record.task == DeliverWebhook.task_path() and record.status == 'queued'
    assert record.inputs['args'][0] == hook_id and record.inputs['args'][3] == {'test': True}
    assert record.labels == {'webhook': hook_id, 'topic': 'orders'}

    assert run(capsys, 'webhooks', 'remove', hook_id)[0] == 0
    assert run(capsys, 'webhooks', 'list')[1] == 'no webhooks\n'
    code, _, err = run(capsys, 'webhooks', 'remove', hook_id)
    assert code == 1 and err == 'kale: error: no webhook %s\n' % hook_id


@pytest.mark.parametrize('argv, problem', [
    (['webhooks', 'add', 'orders', 'ftp://x/'], 'must be http:// or https://'),
    (['webhooks', 'add', 'orders', 'http://10.0.0.1/'], 'is a private address'),
    (['webhooks', 'add', 'orders', URL, '--header', 'nocolon'], '--header must be KEY:VALUE'),
    (['webhooks', 'add', 'orders', URL, '--label', 'novalue'], '--label must be KEY=VALUE'),
    (['webhooks', 'add', 'orders', URL, '--header', 'Webhook-Id: x'], 'set by Kale itself'),
])
def test_a_bad_webhook_is_one_line_and_adds_nothing(allowed, capsys, argv, problem):
    code, _, err = run(capsys, *argv)
    assert code == 1 and problem in err and len(err.splitlines()) == 1
    assert webhooks.list_webhooks() == []


def test_without_records_the_commands_say_so(memory_broker, capsys):
    code, _, err = run(capsys, 'webhooks', 'list')
    assert code == 1 and 'webhooks are kept in the task records: set RECORDS_URL' in err


def test_the_api_without_a_token_lists_and_removes_but_adds_only_when_allowed(allowed):
    client = api_client(create_app(broker=lambda: allowed))
    body = {'topic': 'orders', 'url': URL, 'headers': {'X-Key': 'k'}, 'labels': {'a': 'b'}}
    refused = client.post('/api/webhooks', json=body)
    assert refused.status_code == 403 and 'needs a bearer token' in refused.json()['error']
    assert webhooks.list_webhooks() == []
    with settings.override(WEB_ALLOW_SUBMIT_WITHOUT_TOKEN=True):
        client = api_client(create_app(broker=lambda: allowed))
        added = client.post('/api/webhooks', json=body)
    assert added.status_code == 200
    hook = added.json()
    assert hook['secret'] == webhooks.get(hook['id']).secret
    assert hook['headers'] == {'X-Key': '(hidden)'} and hook['method'] == 'POST'
    [listed] = client.get('/api/webhooks').json()['webhooks']
    assert listed['id'] == hook['id'] and 'secret' not in listed
    assert client.get('/api/webhooks?topic=other').json() == {'webhooks': []}
    assert client.post('/api/webhooks/%s/disable' % hook['id']).json()['active'] is False
    assert client.post('/api/webhooks/%s/test' % hook['id']).status_code == 400
    assert client.post('/api/webhooks/%s/enable' % hook['id']).json()['active'] is True
    task_id = client.post('/api/webhooks/%s/test' % hook['id']).json()['task_id']
    assert records.get(task_id).inputs['args'][0] == hook['id']
    assert client.delete('/api/webhooks/%s' % hook['id']).json() == {'deleted': hook['id']}
    missing = client.delete('/api/webhooks/%s' % hook['id'])
    assert missing.status_code == 404 and missing.json() == {'error': 'no webhook %s' % hook['id']}


@pytest.mark.parametrize('body, problem', [
    ({'url': URL}, 'a JSON object with topic and url'),
    ({'topic': 'orders', 'url': URL, 'secret': 'mine'}, 'a JSON object with topic and url'),
    ({'topic': 'orders', 'url': 'http://169.254.169.254/'}, 'a cloud metadata address'),
    ({'topic': 'orders', 'url': URL, 'method': 'DELETE'}, 'one of POST, PUT, GET'),
    ({'topic': 'orders', 'url': URL, 'labels': ['x']}, 'label filter must be a mapping'),
])
def test_the_api_refuses_a_bad_webhook_with_a_400(allowed, body, problem):
    client = api_client(create_app(token=TOKEN, broker=lambda: allowed),
                        Authorization='Bearer ' + TOKEN)
    answer = client.post('/api/webhooks', json=body)
    assert answer.status_code == 400 and problem in answer.json()['error']
    assert client.post('/api/webhooks', content=b'{not json').status_code == 400


def test_with_a_token_every_webhook_route_needs_it(allowed):
    client = api_client(create_app(token=TOKEN, broker=lambda: allowed))
    hook = webhooks.add('orders', URL)
    bearer = {'Authorization': 'Bearer ' + TOKEN}
    assert client.get('/api/webhooks').status_code == 401
    assert client.post('/api/webhooks', json={'topic': 't', 'url': URL}).status_code == 401
    assert client.delete('/api/webhooks/%s' % hook.id).status_code == 401
    assert client.post('/api/webhooks/%s/disable' % hook.id).status_code == 401
    assert webhooks.get(hook.id).active
    added = client.post('/api/webhooks', json={'topic': 't', 'url': URL}, headers=bearer)
    assert added.status_code == 200 and added.json()['secret'].startswith('whsec_')
    assert len(client.get('/api/webhooks', headers=bearer).json()['webhooks']) == 2
    assert client.delete('/api/webhooks/%s' % hook.id, headers=bearer).status_code == 200


def test_adding_from_another_site_is_refused(allowed):
    from starlette.testclient import TestClient
    with settings.override(WEB_ALLOW_SUBMIT_WITHOUT_TOKEN=True):
        client = TestClient(create_app(broker=lambda: allowed), base_url='http://127.0.0.1')
    assert client.post('/api/webhooks', json={'topic': 't', 'url': URL}).status_code == 403
    assert webhooks.list_webhooks() == []


def test_the_webhook_routes_are_documented(allowed):
    paths = api_client(create_app(broker=lambda: allowed)).get('/api/openapi.json').json()['paths']
    assert set(paths['/api/webhooks']) == {'get', 'post'}
    assert set(paths['/api/webhooks/{webhook_id}']) == {'delete'}
    for action in ('disable', 'enable', 'test'):
        assert set(paths['/api/webhooks/{webhook_id}/%s' % action]) == {'post'}


def test_the_store_on_sqlite_and_postgresql(memory_broker, any_records_url):
    first = webhooks.add('orders', 'https://hooks.example/a', 'put', {'X-Key': 'k'},
                         {'tenant': 't1'})
    second = webhooks.add('orders', 'https://hooks.example/b')
    webhooks.add('invoices', 'https://hooks.example/c')
    assert [hook.id for hook in webhooks.list_webhooks('orders')] == [first.id, second.id]
    webhooks.set_active(second.id, False)
    [active] = webhooks.list_webhooks('orders', active_only=True)
    assert active == webhooks.get(first.id) and active.verified
    assert (active.method, active.headers, active.labels) == ('PUT', {'X-Key': 'k'},
                                                              {'tenant': 't1'})
    assert active.secret == first.secret and active.matches({'tenant': 't1', 'x': 'y'})
    assert not active.matches({'tenant': 't2'}) and not active.matches(None)
    webhooks.remove(first.id)
    assert webhooks.find(first.id) is None
    assert len(webhooks.list_webhooks()) == 2
