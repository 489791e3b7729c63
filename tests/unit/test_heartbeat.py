"""The heartbeat: a task longer than its queue's visibility timeout keeps its
message invisible while it runs, and only while it runs."""
from __future__ import annotations

import logging
import time

import pytest

from kale import worker as kale_worker
from kale.exceptions import SQSError
from kale.transport import MAX_VISIBILITY_SEC
from kale.worker.batch import Batch
from kale.worker.heartbeat import Heartbeat, extension_lead
from tests import tasks
from tests.support.records import recorded_ids


def received_batch(broker, queue_name='beat'):
    queue = broker.queues[queue_name]
    name = broker.declare(queue)
    broker.transport.send(name, _outgoing('body'))
    [received] = broker.transport.receive(name, 1, 0, queue.visibility_timeout_sec)
    return Batch(queue, [received], time.monotonic(), name), received


def _outgoing(body):
    from kale.transport import OutgoingMessage
    return OutgoingMessage(body)


def visible(broker, queue_name='beat'):
    queue = broker.queues[queue_name]
    return broker.transport.receive(broker.declare(queue), 10, 0, 30)


def test_the_lead_is_a_third_of_the_timeout_at_most_ten_seconds():
    assert extension_lead(3) == 1.0
    assert extension_lead(300) == 10.0


@pytest.mark.real_time('the heartbeat thread races the visibility timeout of a real transport')
def test_a_kept_message_stays_invisible_past_its_timeout_and_comes_back_after_stop(
        memory_broker):
    batch, received = received_batch(memory_broker)     # visibility timeout 3 s
    heartbeat = Heartbeat(memory_broker)
    heartbeat.keep(batch, received)
    try:
        assert heartbeat.keeps(received)
        time.sleep(4.5)
        assert visible(memory_broker) == [], 'the message reappeared while kept'
        assert heartbeat.extensions >= 2
        assert batch.deadline > time.monotonic()
        heartbeat.stop()
        assert not heartbeat.keeps(received)
        extensions = heartbeat.extensions
        time.sleep(3.2)
        assert heartbeat.extensions == extensions
        assert [m.message_id for m in visible(memory_broker)] == [received.message_id]
    finally:
        heartbeat.close()


def test_a_failed_extension_is_logged_and_tried_again(memory_broker, monkeypatch, caplog):
    batch, received = received_batch(memory_broker)
    batch.received_at = time.monotonic() - 2.5                 # the first extension is due at once
    calls = []
    real = memory_broker.change_visibility

    def flaky(queue, changes):
        calls.append(changes)
        if len(calls) == 1:
            raise SQSError('endpoint unreachable', 'EndpointUnreachable')
        return real(queue, changes)

    monkeypatch.setattr(memory_broker, 'change_visibility', flaky)
    heartbeat = Heartbeat(memory_broker)
    with caplog.at_level(logging.WARNING, logger='kale.worker.heartbeat'):
        heartbeat.keep(batch, received)
        try:
            deadline = time.monotonic() + 30
            while heartbeat.extensions == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            heartbeat.close()
    assert heartbeat.extensions == 1
    assert len(calls) == 2
    assert 'could not extend the visibility of message %r on queue beat (trying again): ' \
           'endpoint unreachable' % received.message_id in caplog.text


def test_nothing_is_extended_past_twelve_hours_from_the_receive(memory_broker):
    batch, received = received_batch(memory_broker)
    batch.received_at = time.monotonic() - MAX_VISIBILITY_SEC
    heartbeat = Heartbeat(memory_broker)
    heartbeat.keep(batch, received)
    try:
        deadline = time.monotonic() + 30
        while heartbeat.keeps(received) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not heartbeat.keeps(received)
        assert heartbeat.extensions == 0
    finally:
        heartbeat.close()


@pytest.mark.usefixtures('pool')      # on each pool: serial, threads, asyncio
def test_a_long_task_runs_alone_once_and_is_settled_in_time(memory_broker, record):
    quick = tasks.BeatRecordTask.publish_batch(None, [((i,), {}) for i in range(3)])
    long_ids = tasks.LongTask.publish_batch(None, [((4.0,), {}), ((0.1,), {})])
    worker = kale_worker.Worker(queue_names=['beat'], burst=True, broker=memory_broker)
    assert worker.run() == kale_worker.EXIT_OK
    assert sorted(recorded_ids(record, 'ran')) == sorted(quick + long_ids)
    assert sorted(recorded_ids(record, 'start')) == sorted(long_ids), 'a long task ran twice'
    assert worker.heartbeat.extensions >= 1
    assert memory_broker.transport.late_settles == 0, 'a message was settled after it lapsed'
    assert worker.stats['succeeded'] == 5


@pytest.mark.parametrize('limit', [1, 1.5, 30])
def test_a_batch_knows_which_tasks_are_long(memory_broker, limit):
    batch, _ = received_batch(memory_broker)            # visibility timeout 3 s
    assert batch.is_long(limit) is (limit > 1)          # 1 s receive slack, 1 s to settle
