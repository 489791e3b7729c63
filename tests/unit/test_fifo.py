"""FIFO queues: publishing with groups, and a worker that keeps each group in
publish order through failures and retries (on the memory transport; the
transport's FIFO model is checked against moto in test_transport_contract.py,
and real workers in test_worker_e2e.py)."""
from __future__ import annotations

import pytest

from kale import worker as kale_worker
from kale.app import App, default_app
from kale.exceptions import InvalidDelayError, InvalidGroupError, QueueConfigError
from kale.hooks import WorkerHooks
from kale.queue_config import parse_queue_config
from kale.transport.memory import MemoryTransport
from tests import tasks
from tests.retry_tasks import OrderedRetryTask
from tests.support.records import read_records, recorded_ids

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')


@pytest.fixture
def app(pool_app):
    """The test's app on this run's pool (the ``pool_app`` fixture)."""
    return pool_app


def labels(record, event, group=None):
    """The labels recorded for ``event``, in order (of one group's tasks: ``a1``...)."""
    found = [r[4] for r in read_records(record) if r[0] == event]
    return [label for label in found if group is None or label.startswith(group)]


def work_on(app, queues=('ordered',)):
    """A burst worker of ``app`` on ``queues`` (tests.support.work.work, for an
    app); asserts it exits 0. Returns the worker."""
    worker = kale_worker.Worker(queue_names=list(queues), burst=True, app=app)
    code = worker.run()
    assert code == 0, 'the worker exited %d, not 0' % code
    return worker


# --- names and config -------------------------------------------------------------


def test_a_fifo_queue_and_its_dead_letter_queue_end_in_fifo(app):
    broker = app.replace(QUEUE_PREFIX='app-').broker
    ordered = broker.queues['ordered']
    assert broker.sqs_name(ordered) == 'app-ordered.fifo'
    assert broker.dead_letter_name(ordered) == 'app-dlq-ordered.fifo'
    assert broker.sqs_name(broker.queues['default']) == 'app-default'


def test_fifo_must_be_true_or_false():
    with pytest.raises(QueueConfigError, match=r"q.yaml: queue 'jobs': field 'fifo' must be true "
                                               r"or false, got 'yes' \(str\)"):
        parse_queue_config('q.yaml', {'jobs': {
            'priority': 1, 'batch_size': 1, 'visibility_timeout_sec': 30,
            'long_poll_time_sec': 0, 'num_iterations': 1, 'fifo': 'yes'}})


# --- publishing -----------------------------------------------------------------


def test_a_fifo_queue_needs_a_group_id(memory_broker):
    with pytest.raises(InvalidGroupError, match=r"task tests.tasks.OrderedTask: queue 'ordered' "
                                                r"is a FIFO queue: publish needs group_id="):
        tasks.OrderedTask.publish(None, 'x')


def test_a_standard_queue_refuses_group_and_dedup_ids(memory_broker):
    with pytest.raises(InvalidGroupError, match=r"task tests.tasks.RecordTask: dedup_id is only "
                                                r"for FIFO queues, and queue 'default' is not "
                                                r"one"):
        tasks.RecordTask.publish(None, 'x', dedup_id='g')
    with pytest.raises(InvalidGroupError, match=r"task tests.tasks.RecordTask: group_id is for "
                                                r"FIFO and fair queues, and queue 'default' is "
                                                r"neither \(set fifo: true or fair: true"):
        tasks.RecordTask.publish(None, 'x', group_id='g')


@pytest.mark.parametrize('bad', ['', 'has space', 'x' * 129, 7, 'é'])
def test_a_malformed_group_id_is_refused(memory_broker, bad):
    with pytest.raises(InvalidGroupError, match='group_id must be 1-128 letters, digits or '
                                                'punctuation, got'):
        tasks.OrderedTask.publish(None, 'x', group_id=bad)


def test_a_fifo_queue_cannot_delay(memory_broker):
    with pytest.raises(InvalidDelayError, match="queue 'ordered' is a FIFO queue, which cannot "
                                                'delay a message; got delay_sec=5'):
        tasks.OrderedTask.publish(None, 'x', group_id='g', delay_sec=5)


def test_dedup_id_is_for_one_task(memory_broker):
    with pytest.raises(InvalidGroupError, match='dedup_id is for one task'):
        memory_broker_publish_batch_with_dedup()


def memory_broker_publish_batch_with_dedup():
        default_app().publisher.publish_batch(tasks.OrderedTask, None, [(('a',), {}), (('b',), {})],
                                  group_id='g', dedup_id='d')


def test_a_repeated_dedup_id_is_delivered_once(app, record):
    app.publish(tasks.OrderedTask, None, 'first', group_id='g', dedup_id='order-17')
    app.publish(tasks.OrderedTask, None, 'again', group_id='g', dedup_id='order-17')
    work_on(app)
    assert labels(record, 'ran') == ['first']


def test_the_task_id_deduplicates_by_default(app, record, monkeypatch):
    monkeypatch.setattr(tasks.OrderedTask, 'make_task_id',
                        classmethod(lambda cls, label, *a, **k: 'order-' + label))
    app.publish(tasks.OrderedTask, None, 'x', group_id='g')
    app.publish(tasks.OrderedTask, None, 'x', group_id='g')
    app.publish(tasks.OrderedTask, None, 'y', group_id='g')
    work_on(app)
    assert labels(record, 'ran') == ['x', 'y']


# --- running --------------------------------------------------------------------


def test_a_group_completes_in_publish_order_through_a_failure_and_its_retry(app, record):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    app.publish_batch(tasks.OrderedTask, None, [(('a1',), {}), (('a2', 1), {}), (('a3',), {})],
                      group_id='a')
    app.publish_batch(tasks.OrderedTask, None, [(('b1',), {}), (('b2',), {})], group_id='b')
    app.publish(tasks.OrderedTask, None, 'a4', group_id='a')
    sent = app.transport.requests.copy()
    worker = work_on(app)
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3', 'a4']
    assert labels(record, 'ran', 'b') == ['b1', 'b2']
    assert labels(record, 'failed') == ['a2']
    assert worker.stats['succeeded'] == 6
    requests = app.transport.requests
    assert (requests['SendMessage'], requests['SendMessageBatch']) == \
        (sent['SendMessage'], sent['SendMessageBatch']), 'a retry must not send a copy'
    assert requests['ChangeMessageVisibilityBatch'] >= 1, 'the retry keeps its message'


def on_localstack(app, **settings):
    """``app`` with ``settings`` on a memory transport whose FIFO queues behave
    as LocalStack's: a message made visible by a visibility change to 0 is
    delivered while an earlier one of its group is still held (see
    kale.transport.memory)."""
    return App(app.config.replace(**settings), transport=MemoryTransport(localstack_fifo=True))


@pytest.mark.parametrize('settings', [
    {'RETRY_DELAY_MULTIPLE_SEC': 2},
    {'RETRY_DELAY_MULTIPLE_SEC': 1},
    {'RETRY_DELAY_MULTIPLE_SEC': 0.5, 'RETRY_DELAY_JITTER': 0.9},     # 0.05..0.95: 1 s
], ids=['wait-2', 'wait-1', 'jitter-to-1'])
def test_a_group_keeps_its_order_where_a_message_made_visible_jumps_its_group(
        app, record, settings):
    """The group's messages released behind a retry are held until a second
    before it, and never for 0 s (its hold is made 2 s): LocalStack cannot
    run them first."""
    app = on_localstack(app, **settings)
    app.publish_batch(tasks.OrderedTask, None,
                      [(('a1', 1), {})] + [(('a%d' % i,), {}) for i in range(2, 6)],
                      group_id='a')
    work_on(app)
    assert labels(record, 'failed') == ['a1']
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3', 'a4', 'a5']


def test_a_group_keeps_its_order_on_localstack_through_a_retry_after_one_second(app, record):
    app = on_localstack(app, RETRY_DELAY_MULTIPLE_SEC=0)
    app.publish(OrderedRetryTask, None, 'a1', 1, 1, group_id='a')
    app.publish_batch(OrderedRetryTask, None, [(('a%d' % i,), {}) for i in range(2, 6)],
                      group_id='a')
    work_on(app)
    assert labels(record, 'start', 'a')[:2] == ['a1', 'a1']
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3', 'a4', 'a5']


def test_other_groups_run_while_one_waits_for_its_retry(app, record):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=1)
    app.publish_batch(tasks.OrderedTask, None, [(('a1', 1), {}), (('a2',), {})], group_id='a')
    app.publish_batch(tasks.OrderedTask, None, [(('b%d' % i, 0, 0.05), {}) for i in range(1, 6)],
                      group_id='b')
    work_on(app)
    ran = labels(record, 'ran')
    assert ran.index('b5') < ran.index('a1'), 'group b waited for group a'
    assert labels(record, 'ran', 'a') == ['a1', 'a2']


def test_failures_are_counted_from_the_receive_count_then_dead_lettered_in_the_group(
        app, record):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    failing = app.publish(tasks.OrderedTask, None, 'a1', 99, group_id='a')
    app.publish(tasks.OrderedTask, None, 'a2', group_id='a')
    worker = work_on(app)
    assert labels(record, 'failed') == ['a1'] * (tasks.OrderedTask.max_retries + 1)
    assert labels(record, 'ran') == ['a2'], 'the group goes on once a1 is dead-lettered'
    assert recorded_ids(record, 'failed') == [failing] * 3
    assert worker.stats['dead_letter'] == 1
    dead = app.transport.receive(app.broker.dead_letter_name(app.queues['ordered']), 10, 0, 30)
    assert [(m.group_id, m.receive_count) for m in dead] == [('a', 1)]


def test_a_fifo_dead_letter_is_redriven_into_its_group(app, record):
    from kale import admin
    retrying = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    failing = retrying.publish(tasks.OrderedTask, None, 'a1', 99, group_id='a')
    work_on(retrying)
    ordered = app.queues['ordered']
    report = admin.redrive(app.broker, ordered)
    assert report.moved == 1
    [back] = app.transport.receive(app.broker.sqs_name(ordered), 10, 0, 30)
    assert (back.group_id, back.receive_count) == ('a', 1)
    assert app.codec.decode(back.body, app.broker.sqs_name(ordered)).task_id == failing


def test_a_long_task_runs_alone_in_its_place_in_the_group(app, record):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    app.publish(tasks.OrderedTask, None, 'a1', 1, group_id='a')
    app.publish(tasks.OrderedLongTask, None, 'a2', group_id='a')
    app.publish(tasks.OrderedTask, None, 'a3', group_id='a')
    app.publish(tasks.OrderedTask, None, 'b1', group_id='b')
    work_on(app)
    assert labels(record, 'failed') == ['a1']
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3']
    assert labels(record, 'ran', 'b') == ['b1']


class CancelEverything(WorkerHooks):
    def cancelled_tasks(self, queue, task_ids):
        return task_ids


def test_a_cancelled_task_on_a_fifo_queue_is_deleted_unrun(app, record):
    app.publish(tasks.OrderedTask, None, 'a1', group_id='a')
    worker = kale_worker.Worker(queue_names=['ordered'], burst=True, app=app,
                                hooks=[CancelEverything()])
    assert worker.run() == kale_worker.EXIT_OK
    assert labels(record, 'ran') == []
    assert app.broker.counts(app.queues['ordered']).total == 0


@pytest.mark.serial_only("the serial worker's blind first batch (kale.worker.prefetch)")
def test_what_a_blind_batch_gives_back_keeps_its_group_in_publish_order(app, record):
    """The first receive takes the whole group blind; what has not started
    after the prefetch window goes back, stays in its group, and runs next,
    in publish order."""
    app.publish_batch(tasks.OrderedTask, None,
                      [(('a%d' % i, 0, 0.2), {}) for i in range(1, 7)], group_id='a')
    released = []

    class Released(WorkerHooks):
        def on_task_released(self, settlement):
            released.append(settlement.task_id)
    worker = kale_worker.Worker(queue_names=['ordered'], burst=True, app=app, hooks=[Released()])
    worker.prefetch.window_sec = 0.3
    assert worker.run() == 0
    assert labels(record, 'ran') == ['a%d' % i for i in range(1, 7)]
    assert released, 'the blind batch gave nothing back'
