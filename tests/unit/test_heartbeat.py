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
from tests.support.clock import FakeClock
from tests.support.processes import wait_for
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


def test_a_kept_message_stays_invisible_past_its_timeout_and_comes_back_after_stop(
        memory_broker):
    """The transport and the heartbeat on a clock the test moves: the thread
    waits in real time but acts on that clock, so however long a loaded
    machine pauses it, the message's timeout cannot lapse before it does."""
    clock = FakeClock()
    memory_broker.transport.clock = clock
    batch, received = received_batch(memory_broker)     # visibility timeout 3 s
    batch.received_at = clock.monotonic()
    heartbeat = Heartbeat(memory_broker, clock=clock)
    heartbeat.keep(batch, received)
    try:
        assert heartbeat.keeps(received)
        for count in (1, 2):            # each a second before the last lapses: at 2 s, at 4 s
            clock.advance(2.0)
            wait_for(lambda n=count: heartbeat.extensions >= n, 30, 'extension %d' % count)
        clock.advance(0.5)              # 4.5 s: past the 3 s timeout
        assert visible(memory_broker) == [], 'the message reappeared while kept'
        assert batch.deadline > clock.monotonic()
        heartbeat.stop()
        assert not heartbeat.keeps(received)
        extensions = heartbeat.extensions
        clock.advance(2.0)              # the next extension would be due, before the lapse at 7 s
        time.sleep(2.5)                 # (longer than the thread's wait: it would have made it)
        assert heartbeat.extensions == extensions
        clock.advance(1.0)
        assert [m.message_id for m in visible(memory_broker)] == [received.message_id]
    finally:
        heartbeat.close()


def test_a_failed_extension_is_logged_and_tried_again(memory_broker, monkeypatch, caplog):
    # (a queue of 30 s: the retry comes 1 s after the failure, and a loaded
    # machine has 10 s to fail the first before the batch's budget is over)
    batch, received = received_batch(memory_broker, 'default')
    batch.received_at = time.monotonic() - 20                  # the first extension is due at once
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
    assert 'could not extend the visibility of message %r on queue default (trying again): ' \
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
