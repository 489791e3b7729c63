"""The counters the summary, the count and the timeline read
(kale.store.counts) give, on every store, what a scan of the records gives,
after a mix of publications, events in and out of order, retries, cancels,
a queue's purge, a new life of an id, expiry and deletes."""
from __future__ import annotations

import random

import pytest

from kale.statuses import TaskStatus
from kale.store.record import TaskFilter
from kale.store.records import RAN, timeline_point

QUEUED, RUNNING, SCHEDULED = TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SCHEDULED
SUCCEEDED, FAILED, CANCELLED = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED
NOW = 1_000_000.0 + 37.25           # not on a minute
TASKS = ('app.a.Send', 'app.b.Send', 'app.c.Bill')
QUEUES = ('default', 'low')
#: A filter the counters cannot answer, that every record passes: the scan's answer.
SCANNED = TaskFilter(since=-1e12)


def published(task_id, at, task, queue):
    return {'id': task_id, 'task': task, 'queue': queue, 'status': QUEUED, 'attempts': 0,
            'labels': None, 'inputs': None, 'published_at': at, 'updated_at': at}


def event(task_id, status, at, task, queue, duration=1.5, **values):
    row = {'id': task_id, 'task': task, 'queue': queue, 'status': status, 'attempts': 1,
           'published_at': at - 100, 'started_at': at - duration if duration else None,
           'finished_at': at if status in RAN else None, 'duration_sec': duration,
           'worker': 'w1', 'updated_at': at}
    row.update(values)
    return row


def write_a_mix(store, rng):
    records = store.records
    ids = ['t%03d' % i for i in range(120)]
    shape = {task_id: (rng.choice(TASKS), rng.choice(QUEUES)) for task_id in ids}
    first, rest = ids[:100], ids[100:]
    records.write([published(i, NOW - 7000 + n * 50, *shape[i]) for n, i in enumerate(first)],
                  [], [])
    # workers first, then the publication (another task name and queue on the row)
    records.write([], [event(i, SUCCEEDED, NOW - 30 - n, 'worker.Wrong', 'wrong')
                       for n, i in enumerate(rest)], [])
    records.write([published(i, NOW - 200, *shape[i]) for i in rest], [], [])
    records.roll_up()
    for n, task_id in enumerate(first):
        at = NOW - rng.uniform(0, 5000)
        kind = n % 6
        if kind == 0:
            records.write([], [event(task_id, RUNNING, at, *shape[task_id], duration=None)], [])
        elif kind == 1:     # a retry: failed and scheduled, then succeeded
            records.write([], [event(task_id, SCHEDULED, at - 90, *shape[task_id],
                                     next_attempt_at=at - 30)], [])
            records.write([], [event(task_id, SUCCEEDED, at, *shape[task_id],
                                     duration=rng.choice([None, 0.25, 3.0]))], [])
        elif kind == 2:
            records.write([], [event(task_id, FAILED, at, *shape[task_id])], [])
            records.write([], [event(task_id, RUNNING, at - 10, *shape[task_id])], [])  # older
        elif kind == 3:
            records.write([], [event(task_id, SUCCEEDED, at, *shape[task_id],
                                     duration=rng.uniform(0.01, 9))], [])
        elif kind == 4:
            records.cancel(task_id, now=at)
    records.write([], [event('t002', FAILED, NOW - 4000, *shape['t002'])], [])
    records.write([published('t002', NOW - 3000, *shape['t002'])], [], [])   # a new life
    records.mark_purged('low', before=NOW, now=NOW - 20)


def scanned_timeline(store, window_sec, bucket_sec):
    """The timeline as a scan of every record makes it."""
    series = {}
    for record in store.queries.iterate(TaskFilter()):
        if record.status not in RAN or record.finished_at is None \
                or record.finished_at < NOW - window_sec:
            continue
        runs = series.setdefault(record.task, {}).setdefault(
            int(record.finished_at // bucket_sec), {})
        runs.setdefault(record.status, []).append(record.duration_sec)
    answer = {}
    for task, buckets in sorted(series.items()):
        points = []
        for number, runs in sorted(buckets.items()):
            point = {**{status.value: len(runs.get(status, [])) for status in RAN},
                     'duration_sum': 0.0, 'timed': 0}
            for status, durations in runs.items():
                timed = [d for d in durations if d is not None]
                if timed and status != CANCELLED:
                    point['duration_sum'] += sum(timed) / len(timed) * len(durations)
                    point['timed'] += len(durations)
            points.append(timeline_point(number * bucket_sec, point))
        answer[task] = points
    return answer


def assert_same_timeline(got, expected):
    assert list(got) == list(expected)
    for task, points in expected.items():
        assert len(got[task]) == len(points)
        for mine, theirs in zip(got[task], points, strict=True):
            assert {k: v for k, v in mine.items() if k != 'mean_duration_sec'} == \
                {k: v for k, v in theirs.items() if k != 'mean_duration_sec'}
            assert mine['mean_duration_sec'] == pytest.approx(theirs['mean_duration_sec'],
                                                              abs=1e-5)


def assert_counters_match_a_scan(store):
    queries = store.queries
    assert queries.summary(TaskFilter()) == queries.summary(SCANNED)
    for where in (TaskFilter(statuses=(SUCCEEDED, FAILED)), TaskFilter(task='Send'),
                  TaskFilter(queue='low', statuses=(QUEUED,)), TaskFilter(task='app.c.Bill')):
        scanned = TaskFilter(**{**where.__dict__, 'since': -1e12})
        assert queries.summary(where) == queries.summary(scanned)
        assert queries.count(where) == queries.count(scanned)
    for window, bucket in ((3600, 60), (7200, 120), (86400, 1440), (604800, 10080), (3600, 7)):
        answer = queries.timeline(window, bucket, now=NOW)
        assert_same_timeline(answer['series'], scanned_timeline(store, window, bucket))


def test_the_counters_give_what_a_scan_gives_after_a_mix_of_writes(store):
    write_a_mix(store, random.Random(48))
    assert_counters_match_a_scan(store)
    assert store.queries.summary(TaskFilter())['by_status'][SUCCEEDED] > 0
    store.records.roll_up()
    assert_counters_match_a_scan(store)


def test_expiry_and_deletes_leave_the_counters_right(store):
    write_a_mix(store, random.Random(7))
    assert store.records.purge_expired(3000, 4000, now=NOW, queued_ttl=6000) > 0
    assert_counters_match_a_scan(store)
    assert store.queries.delete(TaskFilter(queue='default', statuses=(SUCCEEDED,))) > 0
    assert_counters_match_a_scan(store)
    store.queries.delete(TaskFilter())
    assert store.queries.summary(TaskFilter())['by_task'] == {}
    assert store.queries.timeline(86400, 1440, now=NOW)['series'] == {}


@pytest.mark.applies(store=('sqlite', 'postgres'))    # the memory store deletes at once
def test_a_delete_goes_in_chunks(store, monkeypatch):
    from kale.store.sql import records
    transactions = []
    begin = store.begin

    def counted_begin(write=False):
        transactions.append(write)
        return begin(write)
    monkeypatch.setattr(store, 'begin', counted_begin)
    monkeypatch.setattr(records, 'CHUNK_ROWS', 7)
    store.records.write([published('p%02d' % i, NOW, 'app.a.Send', 'default')
                         for i in range(30)], [], [])
    transactions.clear()
    assert store.queries.delete(TaskFilter()) == 30
    assert transactions.count(True) >= 30 // 7 + 1
    assert store.queries.summary(TaskFilter()) == store.queries.summary(SCANNED)


@pytest.mark.applies(store=('sqlite', 'postgres'))    # the memory store has no schema
def test_a_version_13_store_is_counted_when_migrated(store):
    """Schema version 14 brings the counters: the records already there are
    counted, and the triggers count what comes after."""
    from kale.config import Config
    from kale.store.sql.records import RecordStore
    write_a_mix(store, random.Random(12))
    with store.begin(write=True) as conn:              # back to version 13
        from kale.store.sql import counters
        counters.drop_triggers(conn)
        for table in ('kale_task_counts', 'kale_task_minutes', 'kale_task_periods',
                      'kale_task_changes'):
            conn.exec_driver_sql('DROP TABLE %s' % table)
        conn.exec_driver_sql('UPDATE kale_schema SET version = 13')
    store.records.write([published('late', NOW, 'app.a.Send', 'default')], [], [])
    again = RecordStore(store.url, Config.load('tests.kale_test_settings'))
    try:
        again.records.write([], [event('late', SUCCEEDED, NOW - 5, 'app.a.Send', 'default')], [])
        assert_counters_match_a_scan(again)
        assert again.queries.count(TaskFilter(statuses=(SUCCEEDED,), task='app.a.Send')) > 0
    finally:
        again.dispose()


def test_rows_of_one_id_in_one_write_apply_in_order_and_are_counted_once(store):
    """PostgreSQL writes a batch in one statement, which may not touch a row
    twice: rows of one id go in statements of their own, in order."""
    records = store.records
    records.write([published('d1', NOW - 50, 'app.a.Send', 'default'),
                   published('d1', NOW - 40, 'app.a.Send', 'default'),
                   published('d2', NOW - 40, 'app.b.Send', 'low')],
                  [event('d1', RUNNING, NOW - 30, 'app.a.Send', 'default', duration=None),
                   event('d2', FAILED, NOW - 25, 'app.b.Send', 'low'),
                   event('d1', SUCCEEDED, NOW - 20, 'app.a.Send', 'default'),
                   event('d1', RUNNING, NOW - 35, 'app.a.Send', 'default')], [])    # older
    assert (records.get('d1')['status'], records.get('d1')['published_at']) == \
        (SUCCEEDED, NOW - 40)
    assert_counters_match_a_scan(store)
    assert store.queries.count(TaskFilter()) == 2


def write_raw(store, count, first=0):
    """``count`` records inserted straight into kale_tasks, a statement each,
    as a program other than Kale's writer might: their changes wait, folded
    by no writer (a fifth of them still queued, the rest runs that ended)."""
    from kale.store.sql.schema import tasks
    with store.begin(write=True) as conn:
        for n in range(first, first + count):
            at = NOW - 3000 + n
            ended = n % 5 != 0
            conn.execute(tasks.insert().values(
                id='raw%05d' % n, task=TASKS[n % 3], queue=QUEUES[n % 2],
                status=(SUCCEEDED if n % 3 else FAILED) if ended else QUEUED, attempts=1,
                published_at=at - 10, started_at=at - 2 if ended else None,
                finished_at=at if ended else None, duration_sec=2.0 if ended else None,
                updated_at=at))


def waiting_changes(store):
    with store.begin() as conn:
        return conn.exec_driver_sql('SELECT count(*) FROM kale_task_changes').scalar()


READERS = {
    'summary': lambda queries: queries.summary(TaskFilter()),
    'count': lambda queries: queries.count(TaskFilter(statuses=(SUCCEEDED,))),
    'timeline': lambda queries: queries.timeline(7200, 120, now=NOW),
}


@pytest.mark.parametrize('reader', list(READERS))
# (the memory store counts as it writes: it has no changes to fold)
@pytest.mark.applies(store=('sqlite', 'postgres'))
def test_a_reader_folds_the_changes_no_writer_folded_beyond_the_bound(store, monkeypatch,
                                                                      reader):
    """Records written while no Kale writer ran: up to READ_FOLD_CHANGES
    changes a read adds as they are; beyond, the reader folds them first
    (a read adds every change it finds: 300,000 took 0.77 s a summary)."""
    from kale.store.sql import counters
    monkeypatch.setattr(counters, 'READ_FOLD_CHANGES', 40)
    write_raw(store, 40)
    READERS[reader](store.queries)
    assert waiting_changes(store) == 40                 # not beyond the bound: left
    write_raw(store, 25, first=40)
    READERS[reader](store.queries)
    assert waiting_changes(store) == 0                  # folded by the reader
    assert store.queries.count(TaskFilter()) == 65
    assert_counters_match_a_scan(store)


# (the advisory lock is PostgreSQL's; SQLite folds under its write lock)
@pytest.mark.applies(store=('postgres',))
def test_a_reader_leaves_the_fold_to_whoever_holds_the_writers_lock(store, monkeypatch):
    """PostgreSQL: the fold's advisory lock held (a writer folding), the
    reader does not wait for it, and its answer is right all the same."""
    from kale.store.sql import counters
    monkeypatch.setattr(counters, 'READ_FOLD_CHANGES', 10)
    write_raw(store, 30)
    with store.engine.connect() as holder:
        holder.exec_driver_sql('SELECT pg_advisory_lock(%d)' % counters.ROLL_UP_LOCK)
        try:
            assert store.queries.count(TaskFilter()) == 30
            assert waiting_changes(store) == 30
        finally:
            holder.exec_driver_sql('SELECT pg_advisory_unlock(%d)' % counters.ROLL_UP_LOCK)
    assert store.queries.count(TaskFilter()) == 30
    assert waiting_changes(store) == 0


# (the memory store counts as it writes: it has no changes to fold)
@pytest.mark.applies(store=('sqlite', 'postgres'))
def test_a_reader_that_cannot_fold_reads_the_changes_as_they_are(store, monkeypatch, caplog):
    """A reader whose fold is refused (a database user that may only read)
    answers as before, adding every change, and says so once in its log."""
    from kale.exceptions import RecordsUnavailableError
    from kale.store.sql import counters

    def refused():
        raise RecordsUnavailableError('records store: permission denied for kale_task_counts')
    monkeypatch.setattr(counters, 'READ_FOLD_CHANGES', 10)
    monkeypatch.setattr(store, 'roll_up', refused)
    write_raw(store, 30)
    assert store.queries.count(TaskFilter()) == 30
    assert store.queries.summary(TaskFilter()) == store.queries.summary(SCANNED)
    assert waiting_changes(store) == 30
    said = [r.getMessage() for r in caplog.records if 'could not fold' in r.getMessage()]
    assert len(said) == 1 and 'permission denied' in said[0]
