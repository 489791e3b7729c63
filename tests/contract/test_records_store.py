"""The task records' facet's contract (kale.store.records), on every store:
a publication and a worker's event meet in one row (the newest event wins,
the publisher's columns stay, an id that ended unsuccessfully starts a new
life), attempts are kept once, cancels and purges change only waiting
tasks, expired rows go, and the questions about many records (pages,
counts, summaries, timeline, workers, ids by prefix) give the same answers."""
from __future__ import annotations

from kale.statuses import TaskStatus, WorkerState
from kale.store.record import TaskFilter
from kale.store.records import TASK_COLUMNS

QUEUED, RUNNING, SCHEDULED = TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SCHEDULED
SUCCEEDED, FAILED, CANCELLED = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED


def published(task_id, at=100.0, task='app.tasks.Send', queue='default', labels=None,
              message_id=None):
    return {'id': task_id, 'task': task, 'queue': queue, 'status': QUEUED, 'attempts': 0,
            'labels': labels, 'inputs': None, 'published_at': at, 'message_id': message_id,
            'updated_at': at}


def event(task_id, status, at, **values):
    row = {'id': task_id, 'task': 'worker.Wrong', 'queue': 'wrong', 'status': status,
           'attempts': 1, 'published_at': 1.0, 'started_at': at - 1, 'finished_at': None,
           'duration_sec': 1.0, 'worker': 'w1', 'updated_at': at}
    if status in (SUCCEEDED, FAILED, CANCELLED):
        row['finished_at'] = at
    row.update(values)
    return row


def test_the_columns_are_the_tables():
    from kale.store.sql.schema import tasks
    assert tuple(column.name for column in tasks.columns) == TASK_COLUMNS


def test_a_publication_and_events_meet_in_one_row_the_newest_event_winning(store):
    records = store.records
    records.write([published('t1', labels={'team': 'a'}, message_id='m1')], [], [])
    records.write([], [event('t1', RUNNING, 101.0)], [])
    records.write([], [event('t1', SUCCEEDED, 103.0)], [])
    records.write([], [event('t1', RUNNING, 102.0)], [])          # older: changes nothing
    row = records.get('t1')
    assert (row['status'], row['finished_at'], row['worker']) == (SUCCEEDED, 103.0, 'w1')
    # the publisher's columns stay the publisher's
    assert (row['task'], row['queue'], row['labels'], row['published_at'], row['message_id']) \
        == ('app.tasks.Send', 'default', {'team': 'a'}, 100.0, 'm1')
    assert records.get('missing') is None


def test_a_worker_first_then_the_publication_keeps_the_workers_event(store):
    records = store.records
    records.write([], [event('t1', SUCCEEDED, 105.0)], [])
    records.write([published('t1', at=100.0)], [], [])
    row = records.get('t1')
    assert (row['status'], row['task'], row['published_at']) == (SUCCEEDED, 'app.tasks.Send',
                                                                   100.0)


def test_an_id_that_ended_unsuccessfully_starts_a_new_life_a_succeeded_one_does_not(store):
    records = store.records
    records.write([published('failed', 100.0), published('done', 100.0)], [
        event('failed', FAILED, 110.0, error_type='Boom'), event('done', SUCCEEDED, 110.0)], [])
    records.write([published('failed', 200.0), published('done', 200.0)], [], [])
    again, done = records.get('failed'), records.get('done')
    assert (again['status'], again['error_type'], again['published_at']) == (QUEUED, None, 200.0)
    assert (done['status'], done['published_at']) == (SUCCEEDED, 200.0)


def test_attempts_are_kept_once_oldest_first(store):
    records = store.records
    retry = event('t1', SCHEDULED, 110.0, attempts=1, error_type='Boom', error_message='x')
    records.write([published('t1')], [retry], [])
    records.write([], [retry], [])                               # the same attempt again
    records.write([], [event('t1', SCHEDULED, 120.0, attempts=2, error_type='Again')], [])
    attempts = records.attempts('t1')
    assert [(a['attempt'], a['error_type'], a['status']) for a in attempts] == [
        (1, 'Boom', FAILED), (2, 'Again', FAILED)]
    assert records.attempts('none') == []


def test_an_attempt_keeps_the_delay_of_the_retry_that_followed_it(store):
    records = store.records
    records.write([published('t1')], [event('t1', SCHEDULED, 110.0, next_attempt_at=140.5)], [])
    records.write([], [event('t1', SCHEDULED, 150.0, attempts=2)], [])     # no due time known
    assert [a['retry_delay_sec'] for a in records.attempts('t1')] == [30.5, None]


def test_only_a_waiting_task_is_cancelled(store):
    records = store.records
    records.write([published('q'), published('s'), published('r')],
                  [event('s', SCHEDULED, 101.0), event('r', RUNNING, 101.0)], [])
    assert records.cancel('q', 200.0) and records.cancel('s', 200.0)
    assert not records.cancel('r', 200.0) and not records.cancel('missing', 200.0)
    assert records.cancelled_among(['q', 's', 'r', 'missing']) == {'q', 's'}
    assert records.get('q')['finished_at'] == 200.0
    records.write([], [event('r', SUCCEEDED, 300.0)], [])
    assert records.succeeded_among(['q', 'r']) == {'r'} and records.succeeded_among([]) == set()


def test_message_owners_name_the_first_publication(store):
    records = store.records
    records.write([published('old', 100.0, message_id='m1'), published('new', 200.0,
                                                                        message_id='m1'),
                   published('other', 100.0, message_id='m2')], [], [])
    assert records.message_owners(['m1', 'm2', 'm3']) == {'m1': 'old', 'm2': 'other'}
    assert records.message_owners(['m1'], not_ids=['old']) == {'m1': 'new'}


def test_a_purged_queue_marks_its_waiting_tasks(store):
    records = store.records
    records.write([published('a', 100.0), published('b', 100.0, queue='other'),
                   published('c', 150.0)], [event('d', RUNNING, 100.0, queue='default')], [])
    assert records.mark_purged('default', before=120.0, now=130.0) == 1
    assert records.get('a')['status'] == TaskStatus.PURGED
    assert records.get('c')['status'] == QUEUED and records.get('b')['status'] == QUEUED


def test_expired_records_and_silent_workers_are_purged(store):
    records = store.records
    records.write([published('ok'), published('bad'), published('waiting', 100.0)], [
        event('ok', SUCCEEDED, 110.0), event('bad', FAILED, 110.0)],
        [worker_row('w-old', 100.0), worker_row('w-new', 10_000.0)])
    assert records.purge_expired(None, None, now=10_000.0) == 0
    assert records.purge_expired(3600, 7200, now=3800.0) == 1      # ok only
    assert records.get('ok') is None and records.get('bad') is not None
    assert records.purge_expired(3600, 3600, now=10_000.0, queued_ttl=3600) == 2
    assert [w.id for w in store.queries.workers(now=10_000.0)] == ['w-new']


def worker_row(worker_id, heartbeat_at, stopped_at=None):
    return {'id': worker_id, 'role': 'worker', 'host': 'h', 'pid': 1, 'queues': ['default'],
            'version': '1', 'started_at': heartbeat_at - 10, 'heartbeat_at': heartbeat_at,
            'heartbeat_sec': 5.0, 'stopped_at': stopped_at, 'current_task': None,
            'current_task_name': None, 'counts': {}}


def many(store):
    """Six records over two tasks, two queues and a label."""
    rows = [published('t%d' % n, 100.0 + n, task='app.tasks.%s' % ('Send' if n % 2 else 'Bill'),
                      queue='default' if n < 4 else 'low',
                      labels={'tenant': 'a' if n < 3 else 'b'}) for n in range(6)]
    store.records.write(rows, [event('t1', SUCCEEDED, 200.0, duration_sec=2.0),
                               event('t2', FAILED, 200.0, duration_sec=4.0),
                               event('t3', SCHEDULED, 200.0, next_attempt_at=300.0)], [])


def test_pages_are_newest_first_and_cursors_lead_on(store):
    many(store)
    queries = store.queries
    first, cursor = queries.page(TaskFilter(), limit=4)
    assert [r.id for r in first] == ['t5', 't4', 't3', 't2'] and cursor
    rest, last = queries.page(TaskFilter(), limit=4, cursor=cursor)
    assert [r.id for r in rest] == ['t1', 't0'] and last is None
    assert [r.id for r in queries.iterate(TaskFilter(), page_size=2)] == [
        't5', 't4', 't3', 't2', 't1', 't0']


def test_filters_agree(store):
    many(store)
    queries = store.queries
    cases = {TaskFilter(statuses=(QUEUED,)): {'t0', 't4', 't5'},
             TaskFilter(task='Send'): {'t1', 't3', 't5'},
             TaskFilter(task='app.tasks.Bill'): {'t0', 't2', 't4'},
             TaskFilter(task='tasks.Bill'): set(),
             TaskFilter(queue='low'): {'t4', 't5'},
             TaskFilter(labels=(('tenant', 'a'),)): {'t0', 't1', 't2'},
             TaskFilter(since=102.0, until=104.0): {'t2', 't3'}}
    for where, ids in cases.items():
        assert {r.id for r in queries.iterate(where)} == ids, where
        assert queries.count(where) == len(ids), where


def test_summaries_and_counts(store):
    many(store)
    queries = store.queries
    summary = queries.summary(TaskFilter())
    assert summary['by_status']['queued'] == 3 and summary['by_status']['pending'] == 4
    assert summary['by_task']['app.tasks.Send'] == {'queued': 1, 'succeeded': 1, 'scheduled': 1}
    assert summary['by_queue']['low'] == {'queued': 2}
    counts = queries.counts_by_status()
    assert counts['queued'] == 3 and counts['cancelled'] == 0 and sum(counts.values()) == 6
    assert queries.oldest_queued(now=1000.0) == {'default': 100.0, 'low': 104.0}


def test_scheduled_tasks_due_later_are_counted_by_queue(store):
    many(store)                                 # t3 scheduled on default, due at 300
    store.records.write([], [event('t4', SCHEDULED, 200.0, next_attempt_at=5000.0),
                             event('t5', SCHEDULED, 200.0, next_attempt_at=4000.0)], [])
    queries = store.queries
    assert queries.scheduled_after(250.0) == {'default': (1, 300.0), 'low': (2, 4000.0)}
    assert queries.scheduled_after(300.0) == {'low': (2, 4000.0)}
    assert queries.scheduled_after(5000.0) == {}
    assert queries.delete(TaskFilter(queue='low')) == 2 and queries.count(TaskFilter()) == 4


def test_the_timeline_counts_runs_by_bucket(store):
    many(store)
    timeline = store.queries.timeline(window_sec=600, bucket_sec=60, now=230.0)
    assert timeline['queues_last_minute'] == {'default': 2}
    series = timeline['series']
    assert [(p['succeeded'], p['failed'], p['mean_duration_sec'])
            for p in series['app.tasks.Send']] == [(1, 0, 2.0)]
    assert [(p['succeeded'], p['failed'], p['mean_duration_sec'])
            for p in series['app.tasks.Bill']] == [(0, 1, 4.0)]


def test_workers_by_state_and_ids_by_prefix(store):
    store.records.write([published('abc1'), published('abc2'), published('abd')], [],
                        [worker_row('running', 1000.0), worker_row('lost', 900.0),
                         worker_row('stopped', 1000.0, stopped_at=1000.0)])
    queries = store.queries
    assert [w.id for w in queries.workers(now=1001.0)] == ['running', 'lost', 'stopped']
    assert [w.id for w in queries.workers(WorkerState.LOST, now=1001.0)] == ['lost']
    assert queries.ids_with_prefix('abc', 3) == ['abc1', 'abc2']
    assert queries.ids_with_prefix('ab', 2) == ['abc1', 'abc2']
    assert queries.ids_with_prefix('a%', 3) == [] and queries.ids_with_prefix('zz', 3) == []


def test_a_publications_inputs_are_signed_and_read_back(store):
    row = dict(published('t1'), inputs={'args': [1, 'two'], 'kwargs': {'x': 3}, 'exact': True})
    store.records.write([row], [], [])
    [record], _ = store.queries.page(TaskFilter())
    assert record.args == [1, 'two'] and record.kwargs == {'x': 3}
    assert record.inputs_mac and 'mac' in store.records.get('t1')['inputs']


def test_a_retry_is_claimed_once_and_given_back(store):
    records = store.records
    records.write([published('t1')], [], [])
    assert records.claim_retry('t1', 'retrying:a') and not records.claim_retry('t1', 'retrying:b')
    assert not records.claim_retry('missing', 'retrying:c')
    records.replace_retry('t1', 'retrying:b', 'wrong')              # not its claim: no change
    assert records.retried_as('t1') == 'retrying:a'
    records.replace_retry('t1', 'retrying:a', None)                  # its publish failed
    assert records.retried_as('t1') is None and records.claim_retry('t1', 'retrying:d')
    records.replace_retry('t1', 'retrying:d', 'new-task')
    assert records.retried_as('t1') == 'new-task' and records.retried_as('missing') is None
