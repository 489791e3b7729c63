"""Dead runs in the task records, on SQLite and PostgreSQL: the original
stays failed, the dead run has a record of its own with ``dead_of``, shown by
the REST API and ``kale tasks show``; a failed dead run is not retried from
its record; schema version 8 adds the column, idempotently."""
from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from kale import records
from kale.cli import main
from kale.conf import settings
from kale.store.sql.records import RecordStore
from kale.store.sql.schema import SCHEMA_VERSION
from kale.web.app import create_app
from kale.worker import Worker
from tests import dead_letter_tasks as dt
from tests.support.records import recorded_ids
from tests.support.web import api_client


def work(broker, dead_letters=False):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        assert Worker(queue_names=['default'], burst=True, broker=broker,
                      dead_letters=dead_letters).run() == 0


@pytest.fixture
def handled(memory_broker, any_records_url, record):
    """A PaymentTask that failed for good and whose dead run succeeded."""
    task_id = dt.PaymentTask.publish(None, 'o-9', amount=3)
    work(memory_broker)
    work(memory_broker, dead_letters=True)
    [dead_id] = set(recorded_ids(record, 'dead_done'))
    return task_id, dead_id


def test_the_dead_run_has_its_own_record_linked_to_the_failed_task(memory_broker, handled):
    task_id, dead_id = handled
    original, dead = records.get(task_id), records.get(dead_id)
    assert (original.status, original.dead_of) == ('failed', None)
    assert (dead.status, dead.dead_of, dead.attempts) == ('succeeded', task_id, 2)
    assert dead.task == original.task == dt.PaymentTask.task_path()
    assert dead.queue == 'dlq-default-runs'
    assert [a['status'] for a in records.attempts(dead_id)] == ['failed', 'succeeded']
    client = api_client(create_app(broker=lambda: memory_broker))
    assert client.get('/api/tasks/%s' % dead_id).json()['dead_of'] == task_id
    assert client.get('/api/tasks/%s' % task_id).json()['dead_of'] is None
    listed = {t['id']: t for t in client.get('/api/tasks').json()['tasks']}
    assert listed[dead_id]['dead_of'] == task_id


def test_kale_tasks_show_names_the_task_a_dead_run_handles(handled, capsys):
    task_id, dead_id = handled
    assert main(['tasks', 'show', dead_id[:10]]) == 0
    shown = capsys.readouterr().out
    assert any(line.split() == ['dead_of', task_id] for line in shown.splitlines()), shown


def test_a_failed_dead_run_is_not_retried_from_its_record(memory_broker, any_records_url,
                                                          record):
    task_id = dt.HopelessTask.publish(None, 1)
    work(memory_broker)
    work(memory_broker, dead_letters=True)
    [dead_id] = set(recorded_ids(record, 'dead'))
    assert records.get(dead_id).status == 'failed'
    client = api_client(create_app(broker=lambda: memory_broker))
    answer = client.post('/api/tasks/%s/retry' % dead_id)
    assert answer.status_code == 409
    assert answer.json()['error'] == (
        'task %s cannot be retried: it is the dead run of task %s (kale dlq redrive moves it '
        'back to run its handler again)' % (dead_id, task_id))


def test_the_link_is_kept_whichever_writer_comes_first(any_records_url):
    """The worker that sent the dead run writes its ``queued`` row; the
    worker that runs it may write first. Either way the row keeps the link
    and the newest status."""
    store = records.store(any_records_url)
    now = time.time()
    published = {'id': 'dead-1', 'task': 't.T', 'queue': 'dlq-default-runs', 'status': 'queued',
                 'attempts': 0, 'published_at': now, 'updated_at': now, 'dead_of': 'orig-1'}
    ended = {'id': 'dead-1', 'task': 't.T', 'queue': 'dlq-default-runs', 'status': 'succeeded',
             'attempts': 1, 'published_at': now, 'finished_at': now + 1, 'updated_at': now + 1}
    store.write([], [ended], [])                # the run's event first, without the link
    store.write([published], [], [])
    row = store.get('dead-1')
    assert (row['status'], row['dead_of']) == ('succeeded', 'orig-1')
    store.write([], [dict(ended, id='dead-2', dead_of='orig-2')], [])   # only the run's events
    store.write([], [dict(ended, id='dead-2', status='failed', updated_at=now + 2)], [])
    assert (store.get('dead-2')['status'], store.get('dead-2')['dead_of']) == ('failed', 'orig-2')


def test_schema_version_8_adds_dead_of_once(any_records_url):
    store = RecordStore(any_records_url, settings.config)
    store.migrate()
    with store.begin(write=True) as conn:       # a store migrated before, told it is at 7
        conn.execute(text('UPDATE kale_schema SET version = 7'))
    store.dispose()
    again = RecordStore(any_records_url, settings.config)
    again.migrate()                             # the column is there: nothing to add
    with again.begin() as conn:
        assert conn.execute(text('SELECT version FROM kale_schema')).scalar() == SCHEMA_VERSION
        assert conn.execute(text('SELECT dead_of FROM kale_tasks')).fetchall() == []
    again.dispose()
