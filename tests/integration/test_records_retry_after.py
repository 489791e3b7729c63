"""A run that raised ``Retry(after=..., exc=...)`` in the task records, on
SQLite and PostgreSQL: the task is scheduled for its delay with the cause as
its error, its retried attempt keeps the delay (``retry_delay_sec``) and the
cause, shown by ``records.attempts``, the REST API and ``kale tasks show``;
retries used up leave it failed with the cause in its dead-letter reason;
schema version 12 adds the attempts' column, idempotently."""
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
from tests import retry_tasks as rt
from tests.support.retries import run_first, run_until_it_ran, shifted_broker
from tests.support.web import api_client
from tests.support.work import work


def test_a_retried_attempt_keeps_its_delay_and_its_cause(any_records_url, capsys):
    with shifted_broker() as (broker, clock):
        task_id = rt.LaterTask.publish(None, 3600)
        run_first(broker, clock)                          # asks for an hour
        record = records.get(task_id)
        [retried] = records.attempts(task_id)
        assert (record.status, record.attempts) == ('scheduled', 1)
        assert (record.error_type, record.error_message) == ('ThrottledError',
                                                             '429 Too Many Requests')
        assert record.next_attempt_at == pytest.approx(record.updated_at + 3600, abs=0.01)
        assert 'Retry: after 3600 s: ThrottledError' in record.error_traceback
        assert retried['retry_delay_sec'] == 3600
        assert run_until_it_ran(broker, clock) == 4       # at 15, 30, 45 and 60 minutes
    first, last = records.attempts(task_id)
    assert (first['attempt'], first['status'], first['error_type'], first['retry_delay_sec']) \
        == (1, 'failed', 'ThrottledError', 3600)
    assert (last['attempt'], last['status'], last['retry_delay_sec']) == (2, 'succeeded', None)
    answer = api_client(create_app(broker=lambda: broker)).get('/api/tasks/%s' % task_id).json()
    assert [a['retry_delay_sec'] for a in answer['attempt_history']] == [3600, None]
    assert main(['tasks', 'show', task_id]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith('  1  ')]
    assert shown[0].endswith('ThrottledError: 429 Too Many Requests  (retried after 3600s)')


def test_retries_used_up_leave_the_task_failed_naming_the_cause(memory_broker,
                                                                any_records_url):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=60):
        cause = rt.RetryAfterTask.publish(None, 0, 99)
        bare = rt.RetryAfterTask.publish(None, 0, 99, cause=False)
        work(memory_broker)                               # each retried at once, twice
    record = records.get(cause)
    assert (record.status, record.attempts, record.error_type) == ('failed', 3, 'ThrottledError')
    assert record.dead_letter_reason == \
        'retries_exhausted: Retry: after 0 s: ThrottledError: 429 Too Many Requests'
    assert [a['retry_delay_sec'] for a in records.attempts(cause)] == [0, 0, None]
    plain = records.get(bare)
    assert (plain.error_type, plain.error_message) == ('Retry', 'after 0 s')
    assert plain.dead_letter_reason == 'retries_exhausted: Retry: after 0 s'


def test_schema_version_12_adds_the_attempts_retry_delay_once(any_records_url):
    store = RecordStore(any_records_url, settings.config)
    store.migrate()
    with store.begin(write=True) as conn:       # a store of version 11
        conn.execute(text('ALTER TABLE kale_attempts DROP COLUMN retry_delay_sec'))
        conn.execute(text('UPDATE kale_schema SET version = 11'))
    store.dispose()
    for _ in range(2):                          # the second finds the column there
        again = RecordStore(any_records_url, settings.config)
        again.migrate()
        with again.begin() as conn:
            assert conn.execute(text('SELECT version FROM kale_schema')).scalar() == \
                SCHEMA_VERSION
            assert conn.execute(text('SELECT retry_delay_sec FROM kale_attempts')).fetchall() \
                == []
        again.dispose()


def test_a_burst_worker_leaves_a_long_retry_behind_at_once(any_records_url):
    """Its record is due at the end of the whole wait, an hour on: the burst
    leaves it as it leaves any task due later, instead of waiting for the
    retry's copy, delayed 15 minutes, only to send it on."""
    from kale.worker import Worker
    with shifted_broker() as (broker, clock):
        # Its waits pass at a hundred times real speed, not in no time at all:
        # while the worker waits on its record writer (PostgreSQL on a loaded
        # machine), a clock that runs free passed the copy's 15 minutes.
        clock.sleep = lambda seconds: (time.sleep(seconds / 100),
                                       setattr(clock, 'offset', clock.offset + seconds))
        rt.LaterTask.publish(None, 3600)
        worker = Worker(queue_names=['default'], burst=True, broker=broker, clock=clock)
        assert worker.run() == 0
    assert worker.stats == {'retry': 1}             # not waited for, not sent on
    assert clock.offset < 60
