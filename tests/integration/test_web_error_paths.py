"""The API's errors name no file of the machine kale web runs on: a queue the
queue config does not have, a queue config that cannot be read or does not
validate, a records store that cannot answer, a submission or a schedule on
an unknown queue each say what is wrong without the file's path (an API
caller may be anyone with the token). The command line and the library keep
the path in the message, for the operator on the machine."""
import json
import os

import pytest

from kale.exceptions import UnknownQueueError
from kale.queue_config import build_queue_config
from kale.records import controls
from kale.web import create_app
from tests.support.web import api_client

TOKEN = 'p' * 32


def assert_names_no_path(error, *paths):
    assert error and os.sep not in error, error
    for path in paths:
        assert path not in error, error


@pytest.fixture
def config_path(app):
    return build_queue_config(app.config).path


@pytest.mark.parametrize('route', ['pause', 'resume', 'purge?confirm=nowhere', 'redrive'])
def test_a_queue_the_config_does_not_have_is_named_without_the_configs_path(
        app, memory_broker, records_url, config_path, route):
    client = api_client(create_app(broker=lambda: memory_broker, app=app))
    answer = client.post('/api/queues/nowhere/%s' % route)
    error = answer.json()['error']
    assert answer.status_code == 400
    assert error.startswith("queue 'nowhere' is not in the queue config (queues: "), error
    assert_names_no_path(error, config_path, os.path.dirname(config_path))


def test_the_command_line_and_the_library_keep_the_configs_path(app, records_url, config_path):
    with pytest.raises(UnknownQueueError) as raised:
        controls.pause_queue('nowhere', app=app)
    assert config_path in str(raised.value)


@pytest.mark.parametrize('text, said', [
    (None, 'the queue config cannot be read: No such file or directory'),
    ('default:\n  name: default\n  priority: many\n',
     "the queue config: queue 'default': field 'priority' must be an integer"),
    ('default: [1\n', 'the queue config: not valid YAML: '),
])
def test_a_queue_config_that_cannot_be_read_or_checked_is_not_named_by_its_path(
        app, memory_broker, records_url, tmp_path, text, said):
    path = tmp_path / 'secret-place' / 'queues.yaml'
    if text is not None:
        path.parent.mkdir()
        path.write_text(text)
    broken = app.replace(QUEUE_CONFIG=str(path))
    client = api_client(create_app(broker=lambda: memory_broker, app=broken))
    answer = client.post('/api/queues/default/pause')
    error = answer.json()['error']
    assert answer.status_code == 400 and error.startswith(said), error
    assert_names_no_path(error, str(tmp_path), 'secret-place')


@pytest.mark.parametrize('driver, status, said', [
    ('sqlite', 503, 'records store (sqlite): '),
    ('sqlite+nosuchdriver', 400, 'RECORDS_URL (sqlite) cannot be used'),
])
def test_a_records_store_that_cannot_answer_is_named_by_its_kind(tmp_path, settings_env, caplog,
                                                                 driver, status, said):
    """And a fault of the server's (5xx) is logged whole, path included, for its operator."""
    database = tmp_path / 'secret-place' / 'records.db'
    database.parent.mkdir()
    database.write_bytes(b'not a database, whatever the name says' * 200)
    client = api_client(create_app(records_url='%s:///%s' % (driver, database)))
    answer = client.get('/api/tasks/summary')
    error = answer.json()['error']
    assert answer.status_code == status and error.startswith(said), error
    assert_names_no_path(error, str(tmp_path), 'secret-place')
    logged = [r.getMessage() for r in caplog.records if r.name == 'kale.web.app']
    assert [str(database) in line for line in logged] == ([True] if status >= 500 else [])


def test_a_submission_on_an_unknown_queue_is_refused_without_the_configs_path(
        memory_broker, records_url, config_path):
    client = api_client(create_app(token=TOKEN, broker=lambda: memory_broker),
                        Authorization='Bearer ' + TOKEN)
    document = {'tasks': [{'id': 'a', 'task': 'tests.records_tasks.PlainTask',
                           'args': [{'value': 1}], 'queue': 'nowhere'}]}
    answer = client.post('/api/workflows', content=json.dumps(document))
    error = answer.json()['error']
    assert answer.status_code == 400 and "queue 'nowhere'" in error, error
    assert_names_no_path(error, config_path, os.path.dirname(config_path))


def test_a_schedule_on_an_unknown_queue_is_shown_without_the_configs_path(
        app, memory_broker, records_url, config_path):
    scheduled = app.replace(SCHEDULES={'x': {'task': 'tests.schedule_tasks.Tick',
                                             'schedule': 5, 'queue': 'nowhere'}})
    client = api_client(create_app(broker=lambda: memory_broker, app=scheduled))
    [broken] = client.get('/api/schedules').json()['broken']
    assert "queue 'nowhere' is not in the queue config" in broken['error']
    assert_names_no_path(broken['error'], config_path, os.path.dirname(config_path))
    answer = client.post('/api/schedules/x/run')
    assert answer.status_code == 400 and "queue 'nowhere'" in answer.json()['error']
    assert_names_no_path(answer.json()['error'], config_path, os.path.dirname(config_path))


@pytest.mark.parametrize('settings_text, said', [
    ('methods: [1]\n', 'executors.yaml: methods must be a mapping of method names'),
    ('defaults: {time_limit: soon}\n', 'executors.yaml defaults: '),
])
def test_an_executors_settings_file_that_does_not_check_is_named_without_its_path(
        memory_broker, records_url, tmp_path, settings_text, said):
    from kale.conf import settings
    directory = tmp_path / 'secret-place'
    directory.mkdir()
    (directory / 'executors.yaml').write_text(settings_text)
    with settings.override(EXECUTOR_DIR=str(directory)):
        client = api_client(create_app(token=TOKEN, broker=lambda: memory_broker),
                            Authorization='Bearer ' + TOKEN)
        answer = client.post('/api/workflows', content='{"tasks": [{"id": "a", "method": "m"}]}')
    error = answer.json()['error']
    assert answer.status_code == 400 and error.startswith('tasks[0] (a): ' + said), error
    assert_names_no_path(error, str(tmp_path), 'secret-place')


@pytest.mark.parametrize('case, said', [
    ('symbolic link', 'OUTBOX_URL names a symbolic link in a directory anyone can write to'),
    ('no such driver', 'OUTBOX_URL (sqlite) cannot be used'),
])
def test_an_outbox_database_that_cannot_be_used_is_named_without_its_path(
        app, memory_broker, records_url, tmp_path, case, said):
    shared = tmp_path / 'secret-place'
    shared.mkdir()
    shared.chmod(0o1777)                    # anyone may write there, as in /tmp
    if case == 'symbolic link':
        (shared / 'app.db').symlink_to(tmp_path / 'elsewhere.db')
        url = 'sqlite:///%s' % (shared / 'app.db')
    else:
        url = 'sqlite+nosuchdriver:///%s' % (shared / 'app.db')
    client = api_client(create_app(broker=lambda: memory_broker,
                                   app=app.replace(OUTBOX_URL=url)))
    answer = client.get('/api/outbox')
    error = answer.json()['error']
    assert answer.status_code == 400 and error.startswith(said), error
    assert_names_no_path(error, str(tmp_path), 'secret-place')
