"""Cancellation checks on a SQLite file: a worker keeps the cancelled ids and
queries only for a batch that may hold one, told of new cancellations by the
signal file beside the database (see kale.store.sql.cancels)."""
import os

import pytest
import sqlalchemy

from kale import records
from kale.conf import settings
from kale.exceptions import RecordsUnavailableError
from kale.store.sql import cancels
from kale.store.sql.records import RecordStore
from kale.worker import Worker
from tests import records_tasks as rt


@pytest.fixture
def worker_store(memory_broker, records_url):
    """The store of this process (the worker's side) on a fresh SQLite file."""
    return records.store()


@pytest.fixture
def other_store(records_url):
    """Another process's store on the same file (``kale web`` or the CLI)."""
    store = RecordStore(records_url, settings.config)
    yield store
    store.dispose()


@pytest.fixture
def queries(worker_store, monkeypatch):
    """The check queries the worker's store runs, by SQL."""
    ran = []
    check = RecordStore._check

    def counting(self, sql, params):
        ran.append(sql)
        return check(self, sql, params)
    monkeypatch.setattr(RecordStore, '_check', counting)
    return ran


def queued(count):
    ids = rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(count)])
    records.get(ids[0])             # flushes this process's writer
    return ids


def test_batches_with_no_cancelled_task_cost_no_query(worker_store, queries):
    ids = queued(10)
    for _ in range(5):
        assert worker_store.cancelled_among(ids) == set()
    assert len(queries) == 1 and 'LIMIT' in queries[0]      # the one load of the ids
    assert os.path.getsize(worker_store.cancel_signal) == cancels.STAMP_BYTES


def test_a_cancel_from_another_process_is_seen_at_the_next_batch(worker_store, other_store,
                                                                 queries):
    ids = queued(10)
    assert worker_store.cancelled_among(ids) == set()
    assert other_store.cancel(ids[3])
    assert worker_store.cancelled_among(ids) == {ids[3]}
    assert worker_store.cancelled_among(ids[4:]) == set()   # kept, not a candidate: no query
    loads = [sql for sql in queries if 'LIMIT' in sql]
    assert len(loads) == 2 and len(queries) == 3


def test_a_worker_skips_a_task_cancelled_while_it_runs_other_batches(memory_broker,
                                                                     other_store):
    ran = rt.PlainTask.ran
    ran.clear()
    first = queued(3)
    records.store().cancelled_among(first)          # the worker's ids, loaded before the cancel
    later = queued(2)
    assert other_store.cancel(later[1])
    Worker(broker=memory_broker, burst=True).run()
    assert sorted(ran) == [0, 0, 1, 2]
    assert records.get(later[1]).status == 'cancelled'


def test_cancelled_tasks_from_before_the_worker_started_are_found(worker_store, other_store):
    ids = queued(4)
    assert other_store.cancel(ids[0])
    os.remove(other_store.cancel_signal)            # as a store made by an older Kale
    assert worker_store.cancelled_among(ids) == {ids[0]}


def test_an_id_cancelled_then_published_again_is_asked_about_and_runs(worker_store,
                                                                      other_store):
    ids = queued(2)
    assert other_store.cancel(ids[0])
    assert worker_store.cancelled_among(ids) == {ids[0]}
    later = other_store.get(ids[0])['finished_at'] + 1
    other_store.write([{'id': ids[0], 'task': 'tests.records_tasks.PlainTask',
                        'queue': 'default', 'status': 'queued', 'attempts': 0,
                        'published_at': later, 'updated_at': later}], [], [])
    assert worker_store.cancelled_among(ids) == set()


def test_a_cancel_that_cannot_signal_the_workers_changes_nothing(worker_store, other_store):
    task_id = queued(1)[0]
    os.mkdir(other_store.cancel_signal)
    with pytest.raises(RecordsUnavailableError,
                       match='cannot write the cancellation signal .*-kale-cancels'):
        other_store.cancel(task_id)
    assert other_store.get(task_id)['status'] == 'queued'


def test_without_a_signal_file_every_batch_is_asked_about(worker_store, queries, caplog):
    ids = queued(3)
    os.mkdir(worker_store.cancel_signal)            # cannot be opened
    with worker_store.engine.begin() as conn:       # cancelled behind Kale's back
        conn.execute(sqlalchemy.text("UPDATE kale_tasks SET status = 'cancelled' "
                                     "WHERE id = :id"), {'id': ids[1]})
    assert worker_store.cancelled_among(ids) == {ids[1]}
    assert worker_store.cancelled_among(ids) == {ids[1]}
    assert len(queries) == 2 and not any('LIMIT' in sql for sql in queries)
    assert 'cannot open the cancellation signal' in caplog.text


def test_too_many_cancelled_records_to_keep_means_a_query_per_batch(memory_broker, records_url,
                                                                    other_store, monkeypatch,
                                                                    queries):
    monkeypatch.setattr(cancels, 'MAX_KEPT', 2)
    worker_store = RecordStore(records_url, settings.config)
    try:
        ids = queued(6)
        for task_id in ids[:3]:
            assert other_store.cancel(task_id)
        assert worker_store.cancelled_among(ids[2:]) == {ids[2]}
        assert worker_store.cancelled_among(ids[4:]) == set()
        assert [('LIMIT' in sql) for sql in queries] == [True, False, False]
    finally:
        worker_store.dispose()


@pytest.mark.parametrize('url, path', [
    ('sqlite:////data/records.db', '/data/records.db-kale-cancels'),
    ('sqlite:///records.db', os.path.abspath('records.db') + '-kale-cancels'),
    ('sqlite://', None),
    ('sqlite:///:memory:', None),
    ('sqlite:///file:records.db?mode=ro&uri=true', None),
    ('postgresql://kale@localhost/kale', None),
])
def test_only_a_sqlite_file_has_a_signal_file(url, path):
    assert cancels.signal_path(sqlalchemy.make_url(url)) == path


def test_a_signal_file_deleted_under_a_worker_is_mapped_again(worker_store, other_store,
                                                              monkeypatch):
    monkeypatch.setattr(cancels, 'RECHECK_SEC', 0.0)
    ids = queued(3)
    assert worker_store.cancelled_among(ids) == set()
    os.remove(other_store.cancel_signal)
    assert other_store.cancel(ids[1])                # makes a new file
    assert worker_store.cancelled_among(ids) == {ids[1]}


def test_the_signal_file_is_beside_the_file_a_link_leads_to(tmp_path):
    (tmp_path / 'real.db').touch()
    os.symlink(tmp_path / 'real.db', tmp_path / 'alias.db')
    assert cancels.signal_path(sqlalchemy.make_url('sqlite:///%s' % (tmp_path / 'alias.db'))) \
        == str(tmp_path / 'real.db') + cancels.SIGNAL_SUFFIX


def test_a_committed_cancel_whose_second_signal_fails_is_logged_not_refused(
        worker_store, other_store, monkeypatch, caplog):
    task_id = queued(1)[0]
    sent = []
    send = cancels.send

    def failing_second(path):
        sent.append(path)
        if len(sent) == 2:
            raise PermissionError('read-only now')
        send(path)
    monkeypatch.setattr(cancels, 'send', failing_second)
    assert other_store.cancel(task_id) is True
    assert other_store.get(task_id)['status'] == 'cancelled'
    assert 'is cancelled, but workers on this machine may not see it' in caplog.text
