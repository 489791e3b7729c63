"""Task records through a real worker loop on the in-memory transport, on
SQLite and on PostgreSQL: what publishing and each outcome write, labels,
results, cancellation, waiting, retrying, and TTL purges."""
import time

import pytest

from kale import records
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import (
    PublishError,
    RecordConflictError,
    RecordNotFoundError,
    TaskResultError,
    TaskWaitTimeout,
)
from kale.hooks import WorkerHooks
from kale.records.queries import TaskFilter
from kale.worker import Worker
from tests import records_tasks as rt
from tests import tasks
from tests.support.clock import ShiftedClock
from tests.support.work import work

#: Every test here runs on each pool (serial, threads, asyncio); the threads
#: and asyncio pools write records alike (from the settling thread), so
#: asyncio covers them on PostgreSQL.
pytestmark = [pytest.mark.usefixtures('pool'),
              pytest.mark.not_together(pool='threads', any_records_url='postgres')]


@pytest.fixture
def broker(pool, memory_broker, any_records_url):
    return memory_broker


def test_publish_records_the_task_as_queued_with_its_labels_and_inputs(broker):
    task_id = rt.LabelledTask.publish(None, 't9', 3, labels={'source': 'api', 'n': 4})
    record = records.get(task_id)
    assert record.status == 'queued' and record.attempts == 0
    assert record.labels == {'tenant': 't9', 'source': 'api', 'n': '4'}
    assert record.inputs == {'args': ['t9', 3], 'kwargs': {}, 'exact': True}
    assert record.queue == 'default' and record.task == 'tests.records_tasks.LabelledTask'


def test_a_succeeded_task_has_times_duration_worker_and_its_result(broker):
    task_id = rt.ResultTask.publish(None, 2, 3)
    work(broker)
    record = records.get(task_id)
    assert record.status == 'succeeded' and record.attempts == 1
    assert record.result == {'sum': 5, 'items': [2, 3]}
    assert record.published_at <= record.started_at <= record.finished_at
    assert record.duration_sec is not None
    # The worker is named as its own row names it, so the two join.
    assert record.worker in {row.id for row in records.queries().workers()}


def test_the_result_is_not_stored_unless_the_task_asks(broker):
    task_id = rt.PlainTask.publish(None, 1)
    work(broker)
    assert records.get(task_id).result is None
    with pytest.raises(TaskResultError, match=r'^task \S+ succeeded, but tests.records_tasks.'
                                              r'PlainTask does not store its result: set '
                                              r'store_result = True on the task class$'):
        records.result(task_id)


def one_round(worker):
    """One receive of a started (serial) worker, its batch taken in and run,
    and what ran handed to its settler; no receive after it."""
    worker.refill()                     # (the serial pool's answer waits among its events)
    worker.take_events(0)
    worker.start_waiting()
    worker.gatherer.flush(everything=True)


def one_pass(broker, queues=None):
    """One worker pass, not a burst: a retry copy stays queued, delayed."""
    from kale.worker.settler import Settler
    worker = Worker(broker=broker, queue_names=queues)
    worker.settler = Settler(worker.consumer)
    worker.startup()
    one_round(worker)
    worker.settler.close()
    worker.report_settled()
    worker.shutdown()


@pytest.mark.serial_only("one pass of the serial loop; test_pools.py checks a pool's scheduled records")
def test_a_failure_that_will_retry_is_scheduled_with_its_error(broker, monkeypatch):
    monkeypatch.setattr(rt.BrokenTask, 'max_retries', 1)
    task_id = rt.BrokenTask.publish(None)
    one_pass(broker)
    record = records.get(task_id)
    assert record.status == 'scheduled' and record.attempts == 1
    assert record.error_type == 'ValueError' and record.error_message == 'bad input 42'
    assert 'raise ValueError' in record.error_traceback
    assert record.next_attempt_at > record.started_at


@pytest.mark.serial_only('it drives the serial loop step by step')
def test_an_attempt_reported_late_does_not_hide_the_outcome_of_the_next_one(broker,
                                                                           monkeypatch):
    """Two workers: the first runs attempt 1 (retried at once) but reports its
    batch only after the second has run attempt 2 to the dead-letter queue."""
    from kale.worker.settler import Settler
    monkeypatch.setattr(rt.BrokenTask, 'max_retries', 1)
    task_id = rt.BrokenTask.publish(None)
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):   # the worker's configuration
        late = Worker(broker=broker)
        late.settler = Settler(late.consumer)
        late.startup()
        one_round(late)                     # attempt 1 fails; its retry copy is sent
        late.settler.flush()
        time.sleep(0.01)
        one_pass(broker)                    # attempt 2 fails for good, and is reported
        late.settler.close()
        late.report_settled()                   # attempt 1's report comes in last
        late.shutdown()
    record = records.get(task_id)
    assert (record.status, record.attempts) == ('failed', 2)
    assert record.dead_letter_reason.startswith('retries_exhausted')


@pytest.mark.serial_only('it drives the serial loop step by step')
def test_attempts_one_worker_ran_before_reporting_keep_their_own_start_times(broker,
                                                                            monkeypatch):
    """The first worker runs attempts 1 and 2 before it reports either; the
    second runs attempt 3 to the dead-letter queue and reports first."""
    from kale.worker.settler import Settler
    monkeypatch.setattr(rt.BrokenTask, 'max_retries', 2)
    task_id = rt.BrokenTask.publish(None)
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):   # the worker's configuration
        late = Worker(broker=broker)
        late.settler = Settler(late.consumer)
        late.startup()
        one_round(late)                     # attempt 1, retried at once
        one_round(late)                     # attempt 2, retried at once
        late.settler.flush()
        time.sleep(0.01)
        one_pass(broker)                    # attempt 3 fails for good, and is reported
        late.settler.close()
        late.report_settled()                   # attempts 1 and 2 are reported last
        late.shutdown()
    record = records.get(task_id)
    assert (record.status, record.attempts) == ('failed', 3)


@pytest.mark.serial_only('one pass of the serial loop')
def test_a_fifo_retry_held_by_visibility_is_scheduled_until_its_message_reappears(
        broker, record, caplog):
    """On a FIFO queue a retry keeps its message, invisible for the delay
    (Settlement.hold_sec): the record says when it comes back, and the next
    attempt is counted from the receive count."""
    transport = broker.transport
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=30, RETRY_DELAY_JITTER=0):
        task_id = tasks.OrderedTask.publish(None, 'a1', 1, group_id='a')
        before, held_from = time.time(), time.monotonic()
        one_pass(broker, ['ordered'])
        after, held_by = time.time(), time.monotonic()
    record = records.get(task_id)
    assert record.status == 'scheduled' and record.attempts == 1
    assert record.error_type == 'ValueError'
    assert before + 30 <= record.next_attempt_at <= after + 30
    assert 'retrying in 30s' in caplog.text
    [held] = transport._queue('ordered.fifo').messages.values()
    assert held_from + 30 <= held.visible_at <= held_by + 30
    transport.clock = ShiftedClock(31)                  # the hold has ended
    work(broker)
    record = records.get(task_id)
    assert record.status == 'succeeded' and record.attempts == 2
    assert record.next_attempt_at is None and record.error_type is None


def test_a_task_that_fails_for_good_is_failed_with_the_dead_letter_reason(broker):
    task_id = rt.BrokenTask.publish(None)
    work(broker)
    record = records.get(task_id)
    assert record.status == 'failed'
    assert record.dead_letter_reason.startswith('no_retries')
    assert record.error_type == 'ValueError'


def test_record_args_false_keeps_no_inputs(broker):
    task_id = rt.SecretTask.publish(None, 'password')
    assert records.get(task_id).inputs is None


def test_labels_never_reach_run_task(broker):
    task_id = rt.ResultTask.publish(None, 1, 1, labels={'a': 'b'})
    work(broker)
    assert records.result(task_id) == {'sum': 2, 'items': [1, 1]}


def test_bad_labels_are_refused_at_publish_naming_the_key(broker):
    with pytest.raises(PublishError, match="labels key 'bad key'"):
        rt.PlainTask.publish(None, 1, labels={'bad key': 'x'})
    with pytest.raises(PublishError, match='must be a dict'):
        rt.PlainTask.publish(None, 1, labels=['x'])


def test_publish_batch_records_every_task(broker):
    ids = rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(25)],
                                     labels={'batch': 'b1'})
    records.get(ids[0])             # flushes this process's writer
    assert records.queries().count(TaskFilter(labels=(('batch', 'b1'),))) == 25


def test_a_cancelled_task_is_deleted_unrun_and_stays_cancelled(broker):
    ran = rt.PlainTask.ran
    ran.clear()
    keep = rt.PlainTask.publish(None, 1)
    drop = rt.PlainTask.publish(None, 2)
    assert records.cancel(drop).status == 'cancelled'
    work(broker)
    assert ran == [1]
    assert records.get(drop).status == 'cancelled'
    assert records.get(keep).status == 'succeeded'
    assert broker.counts(broker.queues.get_queue('default')).total == 0


class CountingStore(WorkerHooks):
    """Counts how often the worker asks about cancellations."""

    def __init__(self):
        self.calls = []

    def cancelled_tasks(self, queue, task_ids):
        self.calls.append(list(task_ids))
        return ()


@pytest.mark.serial_only("the serial loop's receive sizes")
def test_cancellations_are_checked_once_per_batch_not_per_task(broker):
    rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(10)])
    counting = CountingStore()
    work(broker, hooks=[counting])
    # One receive brings the ten (a whole batch, blind): one check for all.
    assert [len(ids) for ids in counting.calls] == [10]


def test_an_id_published_again_after_it_failed_starts_a_new_life(broker):
    task_id = rt.NamedBrokenTask.publish(None, 'n1')
    work(broker)
    failed = records.get(task_id)
    assert failed.status == 'failed' and failed.error_type == 'ValueError'
    time.sleep(0.01)
    assert rt.NamedBrokenTask.publish(None, 'n1') == task_id
    record = records.get(task_id)
    assert (record.status, record.attempts) == ('queued', 0)
    assert record.published_at > failed.finished_at
    assert (record.started_at, record.finished_at, record.duration_sec, record.worker) == (
        None, None, None, None)
    assert (record.error_type, record.error_message, record.dead_letter_reason) == (
        None, None, None)


def test_an_id_published_again_after_it_succeeded_stays_succeeded_and_does_not_run(broker):
    """A publish sent again (its answer lost, say) after the task ran: the
    worker deletes the second delivery unrun, and the record agrees."""
    rt.PlainTask.ran.clear()
    task_id = rt.NamedTask.publish(None, 7)
    work(broker)
    succeeded = records.get(task_id)
    assert succeeded.status == 'succeeded'
    time.sleep(0.01)
    assert rt.NamedTask.publish(None, 7) == task_id
    assert records.get(task_id).status == 'succeeded'
    worker = work(broker)
    assert rt.PlainTask.ran == [7]
    assert worker.stats['skipped'] == 1
    record = records.get(task_id)
    assert (record.status, record.finished_at, record.attempts) == (
        'succeeded', succeeded.finished_at, succeeded.attempts)


def test_a_finished_task_cannot_be_cancelled(broker):
    task_id = rt.PlainTask.publish(None, 1)
    work(broker)
    with pytest.raises(RecordConflictError, match='it is succeeded'):
        records.cancel(task_id)


def test_an_unknown_task_is_none_and_not_found(broker):
    assert records.get('nope') is None
    with pytest.raises(RecordNotFoundError, match='no record of task nope'):
        records.cancel('nope')


def test_wait_times_out_naming_the_status(broker):
    task_id = rt.PlainTask.publish(None, 1)
    with pytest.raises(TaskWaitTimeout, match='it is queued'):
        records.wait(task_id, timeout=0.05)


def test_result_of_a_failed_task_says_why(broker):
    task_id = rt.BrokenTask.publish(None)
    work(broker)
    with pytest.raises(TaskResultError, match='it is failed: ValueError: bad input 42'):
        records.result(task_id)


def test_retry_publishes_a_failed_task_again_from_its_record(broker):
    task_id = rt.BrokenTask.publish(None, labels={'tenant': 't1'})
    work(broker)
    new_id = records.retry(task_id)
    record = records.get(new_id)
    assert new_id != task_id and record.status == 'queued'
    assert record.labels == {'tenant': 't1', 'retry_of': task_id}


def test_retry_refuses_a_task_whose_inputs_were_not_kept(broker):
    task_id = rt.SecretTask.publish(None, 'x')
    records.cancel(task_id)
    with pytest.raises(RecordConflictError, match='arguments were not stored whole'):
        records.retry(task_id)


def test_records_past_their_ttl_are_purged(broker):
    old_ok = rt.PlainTask.publish(None, 1)
    old_bad = rt.BrokenTask.publish(None)
    work(broker)
    store = records.store()
    later = time.time() + 100
    assert store.purge_expired(succeeded_ttl=50, failed_ttl=200, now=later) == 1
    assert records.get(old_ok) is None and records.get(old_bad) is not None
    assert store.purge_expired(succeeded_ttl=50, failed_ttl=50, now=later) == 1
    assert records.get(old_bad) is None


def test_the_worker_has_a_row_that_says_it_stopped(broker):
    rt.PlainTask.publish(None, 1)
    work(broker)
    [row] = records.queries().workers()
    assert row.state == 'stopped' and row.role == 'worker'
    assert row.counts == {'succeeded': 1} and 'default' in row.queues


@pytest.mark.real_time('waits for the records writer thread')
def test_a_worker_row_keeps_beating_from_the_writer_thread_while_idle(broker):
    recorder = default_app().recorder
    recorder.heartbeat_sec = 0.1
    recorder.start_process('worker', ['default'], purges=False)
    recorder.flush()
    [first] = records.queries().workers()
    deadline = time.monotonic() + 30
    while records.queries().workers()[0].heartbeat_at <= first.heartbeat_at:
        assert time.monotonic() < deadline, 'no heartbeat was written'
        time.sleep(0.05)
    assert records.queries().workers()[0].state == 'running'
    recorder.stop_process()
    assert records.queries().workers()[0].state == 'stopped'


def test_publish_batch_writes_its_records_in_one_statement(broker, monkeypatch):
    from kale.store.sql.records import RecordStore
    statements = []
    executemany = RecordStore._executemany

    def counting(self, conn, kind, rows):
        statements.append((kind, len(rows)))
        executemany(self, conn, kind, rows)
    monkeypatch.setattr(RecordStore, '_executemany', counting)
    ids = rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(25)])
    assert records.get(ids[-1]).status == 'queued'
    assert statements == [('published', 25)]


def test_running_is_written_before_the_task_runs(broker):
    task_id = rt.SelfAwareTask.publish(None)
    work(broker)
    assert records.result(task_id) == 'running'


@pytest.mark.real_time('waits for the records writer thread')
def test_workers_purge_expired_records_now_and_then(broker):
    old = rt.PlainTask.publish(None, 1)
    work(broker)
    recorder = default_app().recorder
    long_ago = time.time() - 3600
    recorder.store.write([], [dict(records.store().get(old), finished_at=long_ago,
                                   updated_at=time.time() + 1)], [])
    recorder.succeeded_ttl, recorder.purge_interval = 60, 0.2
    recorder.start_process('worker', ['default'], purges=True)
    deadline = time.monotonic() + 30
    while records.get(old) is not None:
        assert time.monotonic() < deadline, 'the expired record was not purged'
        time.sleep(0.05)
    recorder.stop_process()


def test_the_schema_is_created_at_its_version_and_migrating_again_changes_nothing(broker):
    from kale.store.sql.records import RecordStore
    from kale.store.sql.schema import SCHEMA_VERSION, current_version
    store = records.store()
    store.migrate()
    with store.begin() as conn:
        assert current_version(conn) == SCHEMA_VERSION >= 1
    again = RecordStore(store.url, settings.config)          # another process's first use
    again.migrate()
    with again.begin() as conn:
        assert current_version(conn) == SCHEMA_VERSION
    again.dispose()


def test_rows_of_one_write_may_lack_columns_and_keep_their_json(any_records_url):
    """Rows handed over together need not share their keys: a missing column
    is written as null, and JSON columns are encoded either way."""
    store = records.store(any_records_url)
    now = time.time()
    full = {'id': 'full-row', 'task': 't.T', 'queue': 'default', 'status': 'queued',
            'attempts': 0, 'labels': {'tenant': 't1'}, 'inputs': {'args': [1], 'kwargs': {}},
            'published_at': now, 'updated_at': now}
    short = {key: value for key, value in full.items() if key != 'labels'}
    store.write([full, dict(short, id='short-row')], [], [])
    assert store.get('full-row')['labels'] == {'tenant': 't1'}
    got = store.get('short-row')
    assert got['labels'] is None and got['inputs'] == {'args': [1], 'kwargs': {}}


def test_a_write_of_more_rows_than_one_statement_carries_keeps_the_newest_event(
        any_records_url, monkeypatch):
    """SQLite takes many rows per statement (55 events of 18 values under a
    999-variable limit); each row is still applied in order, so an older
    event later in the same write does not overwrite a newer one (and
    PostgreSQL's statement of JSON rows holds an id once)."""
    from kale.records.hooks import EVENT_COLUMNS
    from kale.store.sql import driver
    from kale.store.sql.driver import WriteStatement as DriverStatement
    monkeypatch.setattr(driver, 'SQLITE_MAX_VARIABLES', 999)
    sizes = []
    multirow_sql = DriverStatement.multirow_sql
    monkeypatch.setattr(DriverStatement, 'multirow_sql',
                        lambda self, count: sizes.append(count) or multirow_sql(self, count))
    store = records.store(any_records_url)
    now = time.time()
    ids = ['many-%03d' % i for i in range(75)]
    store.write([{'id': task_id, 'task': 't.T', 'queue': 'default', 'status': 'queued',
                  'attempts': 0, 'published_at': now, 'updated_at': now} for task_id in ids],
                [], [])
    event = dict.fromkeys(EVENT_COLUMNS)
    events = []
    for task_id in ids:         # newer first, then the older one it must not undo
        events.append(dict(event, id=task_id, task='t.T', queue='default', status='succeeded',
                           attempts=1, published_at=now, finished_at=now + 2,
                           updated_at=now + 2))
        events.append(dict(event, id=task_id, task='t.T', queue='default', status='running',
                           attempts=1, published_at=now, started_at=now + 1,
                           updated_at=now + 1))
    store.write([], events, [])
    assert {store.get(task_id)['status'] for task_id in ids} == {'succeeded'}
    if store.dialect == 'sqlite':
        assert sizes == [75, 55, 55, 40]    # 7 values per publication row, 18 per event



def test_an_outcome_is_written_before_its_message_is_deleted(broker):
    """Regression (the chaos run with records, kill -9): outcomes were written
    after the delete, so a worker killed in between left the record queued for good."""
    task_id = rt.PlainTask.publish(None, 3)
    seen = []
    delete = broker.delete

    def checking_delete(queue, handles):
        seen.append(records.store().get(task_id)['status'])
        return delete(queue, handles)
    broker.delete = checking_delete
    work(broker)
    assert seen == ['succeeded']


def test_with_no_settle_wait_the_outcome_follows_the_delete(broker):
    task_id = rt.PlainTask.publish(None, 3)
    seen = []
    delete = broker.delete

    def checking_delete(queue, handles):
        seen.append(records.store().get(task_id)['status'])
        return delete(queue, handles)
    broker.delete = checking_delete
    with settings.override(RECORDS_SETTLE_WAIT_SEC=0):
        from kale.records.recorder import reset_recorders
        reset_recorders()
        work(broker)
    assert seen == ['queued'] and records.get(task_id).status == 'succeeded'


def test_a_duplicate_delivery_of_a_task_that_succeeded_is_not_run_again(broker, any_records_url):
    """A publish whose answer was lost is sent again with the same task id
    (issue: faults). With records on, the second copy is deleted unrun and
    the record keeps the first run."""
    rt.PlainTask.ran.clear()
    task_id = rt.PlainTask.publish(None, 7)
    work(broker)
    first = records.get(task_id)
    assert first.status == 'succeeded' and rt.PlainTask.ran == [7]
    queue = broker.queues['default']
    from kale.message import Message
    again = Message(task_id, rt.PlainTask.task_path(), (7,), {}, published_at=first.published_at)
    broker.send(queue, [default_app().codec.to_outgoing(again, broker.sqs_name(queue))])
    work(broker)
    assert rt.PlainTask.ran == [7]                       # not run again
    assert broker.counts(queue).total == 0               # the duplicate was deleted
    assert records.get(task_id).started_at == first.started_at


def test_a_task_that_ends_before_its_publisher_is_done_keeps_its_outcome(broker, any_records_url,
                                                                           monkeypatch):
    """Regression (chaos, records-outage): the published row carried the time
    the publisher finished its bookkeeping; a task that ran and ended sooner,
    its event written after the published row, lost to it and stayed queued."""
    import types

    import kale.records.hooks as records_hooks
    later = time.time() + 5                   # the publisher's bookkeeping, slow
    monkeypatch.setattr(records_hooks, 'time', types.SimpleNamespace(
        time=lambda: later, monotonic=time.monotonic))
    task_id = rt.PlainTask.publish(None, 1)
    records.get(task_id)                      # the published row is written first
    monkeypatch.undo()
    work(broker)
    assert records.get(task_id).status == 'succeeded'
