"""Payloads kept in S3, through the worker loop, in-process: the in-memory
transport and payload store (tests/e2e/test_payloads_e2e.py runs real workers on
moto's S3). The object goes when its task is done, and stays for every copy."""
import logging
import os

import pytest

from kale import admin
from kale import worker as kale_worker
from kale.app import default_app
from kale.conf import settings
from kale.exceptions import PayloadStoreError
from kale.hooks import WorkerHooks
from kale.transport.payloads import MemoryPayloadStore, using_payload_store
from tests import tasks
from tests.support.records import recorded_ids

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')

BUCKET = 'payload-bucket'
BIG = 3 * 1024 * 1024


@pytest.fixture
def store(memory_broker):
    memory = MemoryPayloadStore(BUCKET)
    with using_payload_store(memory), settings.override(PAYLOAD_BUCKET=BUCKET,
                                                        RETRY_DELAY_MULTIPLE_SEC=0):
        # The broker's codec is that of the settings now (a broker is given its codec).
        memory_broker._codec = default_app().codec
        yield memory


def run_worker(broker):
    worker = kale_worker.Worker(queue_names=['default'], burst=True, broker=broker)
    return worker, worker.run()


def dead_letters(broker):
    queue = broker.queues['default']
    return broker.transport.receive(broker.dead_letter_name(queue), 10, 0, 30)


def test_a_big_argument_reaches_its_task_and_the_object_goes_after_success(
        memory_broker, store, record):
    data = os.urandom(BIG)
    task_id = tasks.RecordTask.publish(None, len(data))       # small: stays in its message
    big_id = tasks.EchoTask.publish(None, data)
    assert len(store.keys(BUCKET)) == 1
    worker, code = run_worker(memory_broker)
    assert code == kale_worker.EXIT_OK
    assert worker.stats['succeeded'] == 2
    assert recorded_ids(record, 'ran') == [task_id]
    assert store.keys(BUCKET) == []
    assert [key.split('/')[1] for key in store.deletes] == [big_id]


def test_a_skipped_task_deletes_its_object(memory_broker, store):
    tasks.SkippedTask.publish(None, os.urandom(BIG))
    _worker, code = run_worker(memory_broker)
    assert code == 0
    assert store.keys(BUCKET) == []


def test_a_retry_reuses_the_object_then_success_deletes_it(memory_broker, store, record):
    task_id = tasks.FlakyOnceTask.publish(None, os.urandom(BIG))
    _worker, code = run_worker(memory_broker)
    assert code == 0
    assert recorded_ids(record, 'failed') == [task_id]
    assert recorded_ids(record, 'ran') == [task_id]
    assert len(store.puts) == 1, 'the retry copy points at the same object'
    assert len(store.gets) == 2
    assert store.keys(BUCKET) == []


def test_a_dead_letter_keeps_its_object_and_purging_dead_letters_deletes_it(
        memory_broker, store, record):
    tasks.NonRetriableTask.publish(None, os.urandom(BIG))
    tasks.NonRetriableTask.publish(None, 'small')
    _worker, code = run_worker(memory_broker)
    assert code == 0
    assert len(recorded_ids(record, 'permanent')) == 2
    assert len(store.keys(BUCKET)) == 1, 'the dead letter still points at it'
    queue = memory_broker.queues['default']
    report = admin.purge_dead_letters(memory_broker, queue)
    assert (report.dead_letters, report.objects) == (2, 1)
    assert store.keys(BUCKET) == []
    assert dead_letters(memory_broker) == []


def test_a_redriven_dead_letter_points_at_its_object_and_runs(memory_broker, store, record):
    data = os.urandom(BIG)
    task_id = tasks.NonRetriableTask.publish(None, data)
    run_worker(memory_broker)
    report = admin.redrive(memory_broker, memory_broker.queues['default'])
    assert report.moved == 1
    assert len(store.puts) == 1
    tasks.NonRetriableTask.publish(None, 'small')
    run_worker(memory_broker)
    assert recorded_ids(record, 'start').count(task_id) == 2


@pytest.mark.parametrize('change,reason', [
    (lambda data: data[:-1] + bytes([data[-1] ^ 1]), 'payload_mismatch'),
    (lambda data: data + b'x', 'payload_mismatch'),
    (None, 'payload_missing'),
])
def test_an_object_changed_or_gone_is_dead_lettered_and_the_worker_goes_on(
        memory_broker, store, record, change, reason):
    task_id = tasks.EchoTask.publish(None, os.urandom(BIG))
    after = tasks.RecordTask.publish(None, 'next')
    [key] = store.keys(BUCKET)
    if change is None:
        del store.objects[BUCKET, key]
    else:
        store.objects[BUCKET, key] = change(store.objects[BUCKET, key])
    _worker, code = run_worker(memory_broker)
    assert code == 0
    assert recorded_ids(record, 'ran') == [after]
    [dead] = dead_letters(memory_broker)
    assert dead.attributes['kale_dead_letter_reason'].startswith(reason + ':')
    assert ('s3://%s/%s' % (BUCKET, key)) in dead.attributes['kale_dead_letter_reason']
    assert dead.attributes['kale_task_id'] == task_id, 'from the verified envelope'
    if change is not None:
        assert store.keys(BUCKET) == [key], 'kept with its dead letter, for a look'


def test_a_payload_s3_does_not_give_back_is_released_for_later_not_dead_lettered(
        memory_broker, store, caplog):
    task_id = tasks.EchoTask.publish(None, os.urandom(BIG))
    store.buckets.clear()                       # every request now fails

    class StopAfterTheBatch(WorkerHooks):
        def after_batch(self, queue, batch):
            worker.stop()

    worker = kale_worker.Worker(queue_names=['default'], broker=memory_broker,
                                hooks=[StopAfterTheBatch()])
    with caplog.at_level(logging.ERROR):
        assert worker.run() == kale_worker.EXIT_OK
    queue = memory_broker.queues['default']
    counts = memory_broker.transport.counts(memory_broker.sqs_name(queue))
    assert (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 1)
    assert dead_letters(memory_broker) == []
    assert 'task %s (tests.tasks.EchoTask): payload not fetched from S3' % task_id in caplog.text
    assert worker.stats.get('succeeded', 0) == 0


def test_an_object_s3_will_not_delete_is_logged_and_settling_goes_on(
        memory_broker, store, caplog):
    task_id = tasks.EchoTask.publish(None, os.urandom(BIG))

    def refuse(bucket, key):
        raise PayloadStoreError('DeleteObject s3://%s/%s: AccessDenied' % (bucket, key))
    store.delete = refuse
    with caplog.at_level(logging.WARNING):
        _worker, code = run_worker(memory_broker)
    assert code == 0
    assert 'task %s (tests.tasks.EchoTask): its payload object was not deleted' % task_id \
        in caplog.text
    queue = memory_broker.queues['default']
    assert memory_broker.transport.counts(memory_broker.sqs_name(queue)).visible == 0


def test_with_the_dead_letter_queue_off_a_dropped_task_deletes_its_object(memory_broker, store):
    memory_broker.dead_letters = False                  # ENABLE_DEAD_LETTER_QUEUE = False
    tasks.NonRetriableTask.publish(None, os.urandom(BIG))
    _worker, code = run_worker(memory_broker)
    assert code == 0
    assert store.keys(BUCKET) == []


# --- FIFO queues: retries keep their message, so its pointer ----------------------

def run_fifo(broker, hooks=()):
    worker = kale_worker.Worker(queue_names=['ordered'], burst=not hooks, broker=broker,
                                hooks=list(hooks))
    return worker.run()


def test_on_a_fifo_queue_a_retry_keeps_the_object_and_success_deletes_it(
        memory_broker, store, record):
    task_id = tasks.OrderedDigestTask.publish(None, os.urandom(BIG), fail_times=1, group_id='g')
    assert run_fifo(memory_broker) == 0
    assert recorded_ids(record, 'failed') == [task_id]
    assert recorded_ids(record, 'ran') == [task_id]
    assert (len(store.puts), len(store.gets)) == (1, 2)
    assert store.keys(BUCKET) == []


def test_on_a_fifo_queue_a_dead_letter_keeps_its_object_in_its_group(
        memory_broker, store, record):
    task_id = tasks.OrderedDigestTask.publish(None, os.urandom(BIG), fail_times=9, group_id='g')
    assert run_fifo(memory_broker) == 0
    assert recorded_ids(record, 'permanent') == [task_id]
    [dead] = memory_broker.transport.receive('dlq-ordered.fifo', 10, 0, 30)
    assert dead.group_id == 'g'
    assert len(store.keys(BUCKET)) == 1


def test_on_a_fifo_queue_a_payload_s3_does_not_give_back_is_held_in_its_group(
        memory_broker, store):
    tasks.OrderedDigestTask.publish(None, os.urandom(BIG), group_id='g')
    store.buckets.clear()

    class StopAfterTheBatch(WorkerHooks):
        def after_batch(self, queue, batch):
            worker_stop()

    worker = kale_worker.Worker(queue_names=['ordered'], broker=memory_broker,
                                hooks=[StopAfterTheBatch()])
    worker_stop = worker.stop
    assert worker.run() == 0
    counts = memory_broker.transport.counts('ordered.fifo')
    assert (counts.visible, counts.in_flight) == (0, 1), 'held invisible, not copied'
    assert memory_broker.transport.counts('dlq-ordered.fifo').visible == 0
