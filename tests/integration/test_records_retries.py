"""Retrying from a record happens once per task; ids are found by a prefix;
every attempt of a task is kept."""
from __future__ import annotations

import re
import threading

import pytest

from kale import records
from kale.app import default_app
from kale.cli import main
from kale.conf import settings
from kale.exceptions import RecordConflictError, RecordNotFoundError
from kale.web.app import create_app
from tests import records_tasks as rt
from tests.support.web import api_client
from tests.support.work import work


@pytest.fixture
def failed(memory_broker, any_records_url):
    ids = [rt.BrokenTask.publish(None) for _ in range(3)]
    work(memory_broker)
    assert {records.get(task_id).status for task_id in ids} == {'failed'}
    return ids


def queued(broker):
    return broker.counts(broker.queues['default']).visible


def test_a_task_retried_twice_is_published_once(memory_broker, failed):
    first = records.retry(failed[0])
    assert records.retry(failed[0]) == first
    assert records.retry_reporting(failed[0]) == (first, False)
    assert queued(memory_broker) == 1
    assert records.get(failed[0]).retried_as == first
    assert records.get(first).labels['retry_of'] == failed[0]


def test_retries_racing_from_threads_publish_once(memory_broker, failed):
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(records.retry(failed[1])))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(answers)) == 1 and len(answers) == 6
    assert queued(memory_broker) == 1


def test_a_publish_that_fails_gives_the_claim_back(memory_broker, failed, monkeypatch):
    from kale.exceptions import PublishError

    def refuse(*args, **kwargs):
        raise PublishError('SQS said no')
    monkeypatch.setattr(default_app().publisher, 'publish_batch', refuse)
    with pytest.raises(PublishError):
        records.retry(failed[2])
    assert records.get(failed[2]).retried_as is None
    monkeypatch.undo()
    assert records.retry(failed[2]) and queued(memory_broker) == 1


def test_a_task_is_found_by_a_unique_prefix_of_its_id(failed):
    task_id = failed[0]
    assert records.resolve(task_id[:8]) == task_id
    assert records.resolve(task_id) == task_id
    with pytest.raises(RecordNotFoundError, match='^no record of task zzzzzzzz, nor of one'):
        records.resolve('zzzzzzzz')
    with pytest.raises(RecordNotFoundError, match='^no record of task ab$'):
        records.resolve('ab')


def test_an_ambiguous_prefix_says_so(any_records_url):
    store = records.store()
    store.write([{'id': 'same-%d' % i, 'task': 't.T', 'queue': 'q', 'status': 'queued',
                  'attempts': 0, 'published_at': 1.0, 'updated_at': 1.0} for i in (1, 2)], [], [])
    with pytest.raises(RecordConflictError, match='^task id prefix same- is ambiguous: same-1, '
                                                  'same-2 match; give more of the id$'):
        records.resolve('same-')


def test_the_cli_shows_retries_and_cancels_by_prefix(memory_broker, failed, capsys):
    assert main(['tasks', 'show', failed[0][:8]]) == 0
    shown = capsys.readouterr().out
    assert failed[0] in shown
    assert re.search(r'^attempts:\n  1  failed  \S+Z  [\d.]+s  \S+@\S+  ValueError: bad input 42$',
                     shown, re.M), shown
    assert main(['tasks', 'retry', failed[0][:8]]) == 0
    first = capsys.readouterr().out.strip()
    assert main(['tasks', 'retry', failed[0]]) == 0
    again = capsys.readouterr()
    assert again.out.strip() == first and 'was retried before, as %s' % first in again.err
    assert main(['tasks', 'cancel', first[:10]]) == 0
    assert records.get(first).status == 'cancelled'


def test_the_cli_retries_every_failed_task_of_a_filter_once(memory_broker, failed, capsys):
    ok = rt.PlainTask.publish(None, 1)
    work(memory_broker)
    assert main(['tasks', 'retry', '--failed', '--task', 'BrokenTask']) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and 'published 3; 0 retried before; 0 refused' in err
    assert main(['tasks', 'retry', '--failed']) == 0
    assert 'published 0; 3 retried before' in capsys.readouterr().err
    assert records.get(ok).retried_as is None
    assert main(['tasks', 'retry']) == 1
    assert 'give a TASK_ID, or --failed' in capsys.readouterr().err


def test_the_api_retries_once_in_bulk_and_by_prefix(memory_broker, failed):
    client = api_client(create_app(broker=lambda: memory_broker))
    one = client.post('/api/tasks/%s/retry' % failed[0][:8]).json()
    assert one['published'] and one['retry_of'] == failed[0]
    again = client.post('/api/tasks/%s/retry' % failed[0]).json()
    assert again == dict(one, published=False)
    bulk = client.post('/api/tasks/retry?status=failed').json()
    assert sorted(item['retry_of'] for item in bulk['published']) == sorted(failed[1:])
    assert bulk['already_retried'] == 1 and bulk['refused'] == []
    assert queued(memory_broker) == 3
    detail = client.get('/api/tasks/%s' % failed[1][:12]).json()
    assert detail['id'] == failed[1] and detail['retried_as']


def test_the_api_purges_a_queue_only_with_its_name_as_confirmation(memory_broker,
                                                                   any_records_url):
    waiting = rt.PlainTask.publish(None, 1)
    client = api_client(create_app(broker=lambda: memory_broker))
    refused = client.post('/api/queues/default/purge?confirm=yes')
    assert refused.status_code == 400 and refused.json()['error'] == (
        'purging queue default deletes every message in it: repeat its name as confirm=default')
    assert queued(memory_broker) == 1
    done = client.post('/api/queues/default/purge?confirm=default').json()
    assert done == {'queue': 'default', 'purged': True, 'records_marked_purged': 1}
    assert queued(memory_broker) == 0 and records.get(waiting).status == 'purged'


def test_every_attempt_is_kept_with_its_times_worker_and_outcome(memory_broker, any_records_url):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0, RETRY_DELAY_JITTER=0):
        task_id = rt.TwiceBrokenTask.publish(None)
        work(memory_broker)
    history = records.attempts(task_id)
    assert [(a['attempt'], a['status']) for a in history] == \
        [(1, 'failed'), (2, 'failed'), (3, 'succeeded')]
    assert [a['error_message'] for a in history] == ['attempt 1 fails', 'attempt 2 fails', None]
    assert all(a['worker'] and a['started_at'] and a['duration_sec'] is not None
               for a in history)
    client = api_client(create_app(broker=lambda: memory_broker))
    answer = client.get('/api/tasks/%s' % task_id).json()
    assert [a['status'] for a in answer['attempt_history']] == ['failed', 'failed', 'succeeded']
    assert answer['attempt_history'][0]['started_at'].endswith('Z')
