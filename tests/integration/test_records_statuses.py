"""Records that would otherwise stay queued for ever: purged queues, FIFO
publishes SQS deduplicated, and queued records past SQS's retention; and the
oldest-waiting gauge that must not count tasks whose delay has not passed."""
from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, inspect, text

from kale import records
from kale.app import App
from kale.cli import main
from kale.conf import settings
from kale.store.sql.records import RecordStore
from kale.store.sql.schema import SCHEMA_VERSION
from tests import records_tasks as rt
from tests import tasks
from tests.support.work import work


def test_a_purge_marks_the_queues_waiting_records_purged(memory_broker, records_url, capsys,
                                                         monkeypatch):
    done = rt.PlainTask.publish(None, 1)
    work(memory_broker)
    waiting = rt.PlainTask.publish(None, 2)
    delayed = rt.PlainTask.publish(None, 3, delay_sec=600)
    elsewhere = tasks.HighRecordTask.publish(None)
    monkeypatch.setattr(App, 'command_broker', property(lambda app: memory_broker))
    assert main(['purge', 'default', '--yes']) == 0
    out = capsys.readouterr().out
    assert 'marked 2 waiting task records of default purged' in out
    assert records.get(waiting).status == 'purged' and records.get(delayed).status == 'purged'
    assert records.get(waiting).finished
    assert records.get(done).status == 'succeeded'
    assert records.get(elsewhere).status == 'queued'
    assert memory_broker.counts(memory_broker.queues['default']).total == 0


def test_a_task_published_after_the_purge_began_stays_queued(records_url):
    store = records.store()
    before = time.time()
    store.write([{'id': 'after', 'task': 't.T', 'queue': 'default', 'status': 'queued',
                  'attempts': 0, 'published_at': before + 5, 'updated_at': before + 5}], [], [])
    assert store.mark_purged('default', before) == 0
    assert records.get('after').status == 'queued'


def test_a_fifo_publish_sqs_deduplicated_is_recorded_as_such(memory_broker, any_records_url):
    first = tasks.OrderedTask.publish(None, 'a', group_id='g', dedup_id='same')
    second = tasks.OrderedTask.publish(None, 'a', group_id='g', dedup_id='same')
    third = tasks.OrderedTask.publish(None, 'b', group_id='g', dedup_id='other')
    assert len({first, second, third}) == 3
    record = records.get(second)
    assert record.status == 'deduplicated' and record.duplicate_of == first
    assert record.finished and record.finished_at is not None
    assert records.get(first).status == 'queued' and records.get(first).message_id
    assert records.get(third).status == 'queued' and records.get(third).duplicate_of is None
    assert memory_broker.counts(memory_broker.queues['ordered']).visible == 2


def test_queued_records_expire_after_sqs_could_have_kept_their_message(any_records_url):
    store = records.store()
    now = time.time()
    day = 24 * 3600
    rows = [{'id': 'old-queued', 'status': 'queued', 'updated_at': now - 15 * day},
            {'id': 'old-scheduled', 'status': 'scheduled', 'updated_at': now - 15 * day},
            {'id': 'young-queued', 'status': 'queued', 'updated_at': now - 13 * day}]
    store.write([dict(row, task='t.T', queue='default', attempts=0,
                      published_at=row['updated_at']) for row in rows], [], [])
    assert store.purge_expired(None, None, now=now, queued_ttl=14 * day) == 2
    assert records.get('old-queued') is None and records.get('old-scheduled') is None
    assert records.get('young-queued').status == 'queued'


def test_the_queued_ttl_setting_is_checked_and_defaults_to_sqs_retention():
    from kale.conf import settings
    from kale.exceptions import ImproperlyConfigured
    assert settings.RECORDS_QUEUED_TTL_SEC == 14 * 24 * 3600
    with pytest.raises(ImproperlyConfigured, match='RECORDS_QUEUED_TTL_SEC'):
        with settings.override(RECORDS_QUEUED_TTL_SEC='soon'):
            settings.check()


def test_the_oldest_waiting_task_is_counted_from_when_it_became_due(memory_broker, records_url):
    queries = records.queries()
    before = time.time()
    rt.PlainTask.publish(None, 1, delay_sec=600)
    records.get('no-such-task')                 # a read writes what this process holds first
    assert 'default' not in queries.oldest_queued()        # its delay has not passed
    now = time.time()
    # (due 600 s after its publish, which came between those two reads)
    assert before + 600 <= queries.oldest_queued(now=now + 700)['default'] <= now + 600
    waiting = rt.PlainTask.publish(None, 2)
    published = records.get(waiting).published_at
    assert queries.oldest_queued()['default'] == pytest.approx(published, abs=0.01)


def test_a_version_1_store_is_migrated_keeping_its_rows(tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'v1.db')
    engine = create_engine(url)
    with engine.begin() as conn:                  # the tables as version 1 made them
        conn.execute(text(
            'CREATE TABLE kale_tasks (id VARCHAR(128) PRIMARY KEY, task VARCHAR(255) NOT NULL, '
            'queue VARCHAR(128) NOT NULL, status VARCHAR(16) NOT NULL, attempts INTEGER NOT '
            'NULL, labels JSON, inputs JSON, published_at FLOAT NOT NULL, started_at FLOAT, '
            'finished_at FLOAT, next_attempt_at FLOAT, duration_sec FLOAT, worker '
            'VARCHAR(128), error_type VARCHAR(255), error_message TEXT, error_traceback TEXT, '
            'dead_letter_reason VARCHAR(512), result JSON, updated_at FLOAT NOT NULL)'))
        conn.execute(text("INSERT INTO kale_tasks (id, task, queue, status, attempts, "
                          "published_at, updated_at) VALUES ('old', 't.T', 'q', 'queued', 0, "
                          "1.0, 1.0)"))
        conn.execute(text('CREATE TABLE kale_schema (version INTEGER NOT NULL)'))
        conn.execute(text('INSERT INTO kale_schema (version) VALUES (1)'))
    engine.dispose()
    store = RecordStore(url, settings.config)
    assert store.get('old')['status'] == 'queued'
    with store.begin() as conn:
        columns = {c['name'] for c in inspect(conn).get_columns('kale_tasks')}
        version = conn.execute(text('SELECT version FROM kale_schema')).scalar()
        tables = set(inspect(conn).get_table_names())
    assert {'message_id', 'duplicate_of', 'retried_as', 'dead_of'} <= columns
    assert version == SCHEMA_VERSION
    assert {'kale_attempts', 'kale_workflows', 'kale_workflow_nodes', 'kale_webhooks'} <= tables


def test_a_version_3_postgresql_store_widens_worker_to_fit_a_workers_id(postgres_cluster):
    """kale_tasks.worker holds a kale_workers.id: after migrating to version 4
    a 160-character process id fits both, where version 3 refused it."""
    url = postgres_cluster.new_database()
    first = RecordStore(url, settings.config)                      # today's tables, then back to version 3
    first.migrate()
    first.dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text('ALTER TABLE kale_tasks ALTER COLUMN worker TYPE VARCHAR(128)'))
        conn.execute(text('UPDATE kale_schema SET version = 3'))
    long_id = ('h' * 120) + ':4194304@2026-11-24T10:15:03Z'     # the longest an id gets
    assert len(long_id) <= 160
    row = {'id': 'old', 'task': 't.T', 'queue': 'q', 'status': 'running', 'attempts': 1,
           'published_at': 1.0, 'updated_at': 1.0, 'worker': long_id}
    with pytest.raises(Exception, match='too long'):
        with engine.begin() as conn:
            conn.execute(text('INSERT INTO kale_tasks (id, task, queue, status, attempts, '
                              'published_at, updated_at, worker) VALUES (:id, :task, :queue, '
                              ':status, :attempts, :published_at, :updated_at, :worker)'), row)
    engine.dispose()
    store = RecordStore(url, settings.config)
    store.migrate()
    store.write([row], [], [])
    assert store.get('old')['worker'] == long_id
    with store.begin() as conn:
        assert conn.execute(text('SELECT version FROM kale_schema')).scalar() == SCHEMA_VERSION
    store.dispose()
