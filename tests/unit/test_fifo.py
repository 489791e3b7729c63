"""FIFO queues: publishing with groups, and a worker that keeps each group in
publish order through failures and retries (on the memory transport; the
transport's FIFO model is checked against moto in test_transport_contract.py,
and real workers in test_worker_e2e.py)."""
from __future__ import annotations

import pytest

from kale import worker as kale_worker
from kale.broker import Broker
from kale.conf import settings
from kale.exceptions import InvalidDelayError, InvalidGroupError, QueueConfigError
from kale.hooks import WorkerHooks
from kale.queue_config import get_queue_config, parse_queue_config
from kale.transport.memory import MemoryTransport
from tests import tasks
from tests.support.records import read_records, recorded_ids
from tests.support.work import work

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')


def labels(record, event, group=None):
    """The labels recorded for ``event``, in order (of one group's tasks: ``a1``...)."""
    found = [r[4] for r in read_records(record) if r[0] == event]
    return [label for label in found if group is None or label.startswith(group)]


# --- names and config -------------------------------------------------------------


def test_a_fifo_queue_and_its_dead_letter_queue_end_in_fifo():
    broker = Broker(MemoryTransport(), get_queue_config(settings.config), prefix='app-')
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
    from kale.publisher import get_publisher
    get_publisher().publish_batch(tasks.OrderedTask, None, [(('a',), {}), (('b',), {})],
                                  group_id='g', dedup_id='d')


def test_a_repeated_dedup_id_is_delivered_once(memory_broker, record):
    tasks.OrderedTask.publish(None, 'first', group_id='g', dedup_id='order-17')
    tasks.OrderedTask.publish(None, 'again', group_id='g', dedup_id='order-17')
    work(memory_broker, queues=['ordered'])
    assert labels(record, 'ran') == ['first']


def test_the_task_id_deduplicates_by_default(memory_broker, record, monkeypatch):
    monkeypatch.setattr(tasks.OrderedTask, 'make_task_id',
                        classmethod(lambda cls, label, *a, **k: 'order-' + label))
    tasks.OrderedTask.publish(None, 'x', group_id='g')
    tasks.OrderedTask.publish(None, 'x', group_id='g')
    tasks.OrderedTask.publish(None, 'y', group_id='g')
    work(memory_broker, queues=['ordered'])
    assert labels(record, 'ran') == ['x', 'y']


# --- running --------------------------------------------------------------------


def test_a_group_completes_in_publish_order_through_a_failure_and_its_retry(memory_broker,
                                                                            record):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        tasks.OrderedTask.publish_batch(None, [(('a1',), {}), (('a2', 1), {}), (('a3',), {})],
                                        group_id='a')
        tasks.OrderedTask.publish_batch(None, [(('b1',), {}), (('b2',), {})], group_id='b')
        tasks.OrderedTask.publish(None, 'a4', group_id='a')
        sent = memory_broker.transport.requests.copy()
        worker = work(memory_broker, queues=['ordered'])
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3', 'a4']
    assert labels(record, 'ran', 'b') == ['b1', 'b2']
    assert labels(record, 'failed') == ['a2']
    assert worker.stats['succeeded'] == 6
    requests = memory_broker.transport.requests
    assert (requests['SendMessage'], requests['SendMessageBatch']) == \
        (sent['SendMessage'], sent['SendMessageBatch']), 'a retry must not send a copy'
    assert requests['ChangeMessageVisibilityBatch'] >= 1, 'the retry keeps its message'


def test_other_groups_run_while_one_waits_for_its_retry(memory_broker, record):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=1):
        tasks.OrderedTask.publish_batch(None, [(('a1', 1), {}), (('a2',), {})], group_id='a')
        tasks.OrderedTask.publish_batch(None, [(('b%d' % i, 0, 0.05), {}) for i in range(1, 6)],
                                        group_id='b')
        work(memory_broker, queues=['ordered'])
    ran = labels(record, 'ran')
    assert ran.index('b5') < ran.index('a1'), 'group b waited for group a'
    assert labels(record, 'ran', 'a') == ['a1', 'a2']


def test_failures_are_counted_from_the_receive_count_then_dead_lettered_in_the_group(
        memory_broker, record):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        failing = tasks.OrderedTask.publish(None, 'a1', 99, group_id='a')
        tasks.OrderedTask.publish(None, 'a2', group_id='a')
        worker = work(memory_broker, queues=['ordered'])
    assert labels(record, 'failed') == ['a1'] * (tasks.OrderedTask.max_retries + 1)
    assert labels(record, 'ran') == ['a2'], 'the group goes on once a1 is dead-lettered'
    assert recorded_ids(record, 'failed') == [failing] * 3
    assert worker.stats['dead_letter'] == 1
    dead = memory_broker.transport.receive('dlq-ordered.fifo', 10, 0, 30)
    assert [(m.group_id, m.receive_count) for m in dead] == [('a', 1)]


def test_a_fifo_dead_letter_is_redriven_into_its_group(memory_broker, record):
    from kale import admin
    from kale.codec import decode
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        failing = tasks.OrderedTask.publish(None, 'a1', 99, group_id='a')
        work(memory_broker, queues=['ordered'])
    report = admin.redrive(memory_broker, memory_broker.queues['ordered'])
    assert report.moved == 1
    [back] = memory_broker.transport.receive('ordered.fifo', 10, 0, 30)
    assert (back.group_id, back.receive_count) == ('a', 1)
    assert decode(back.body, 'ordered.fifo').task_id == failing


def test_a_long_task_runs_alone_in_its_place_in_the_group(memory_broker, record):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        tasks.OrderedTask.publish(None, 'a1', 1, group_id='a')
        tasks.OrderedLongTask.publish(None, 'a2', group_id='a')
        tasks.OrderedTask.publish(None, 'a3', group_id='a')
        tasks.OrderedTask.publish(None, 'b1', group_id='b')
        work(memory_broker, queues=['ordered'])
    assert labels(record, 'failed') == ['a1']
    assert labels(record, 'ran', 'a') == ['a1', 'a2', 'a3']
    assert labels(record, 'ran', 'b') == ['b1']


class CancelEverything(WorkerHooks):
    def cancelled_tasks(self, queue, task_ids):
        return task_ids


def test_a_cancelled_task_on_a_fifo_queue_is_deleted_unrun(memory_broker, record):
    tasks.OrderedTask.publish(None, 'a1', group_id='a')
    worker = kale_worker.Worker(queue_names=['ordered'], burst=True, broker=memory_broker,
                                hooks=[CancelEverything()])
    assert worker.run() == kale_worker.EXIT_OK
    assert labels(record, 'ran') == []
    assert memory_broker.counts(memory_broker.queues['ordered']).total == 0
