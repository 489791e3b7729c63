"""Messages a worker died holding run alone; releases never count toward redrive."""
import time

import pytest

from kale import message as kale_message
from kale.app import App
from kale.events import Outcome
from kale.exceptions import SQSError
from kale.hooks import WorkerHooks
from kale.transport import ReceivedMessage
from kale.transport.memory import MemoryTransport
from kale.worker import Worker
from kale.worker.batch import Batch, Opened
from kale.worker.consumer import Consumer
from kale.worker.settler import Settler
from kale.worker.suspects import (
    held_deliveries,
    isolate_suspect,
    release_copy,
    unsettled_deliveries,
)
from tests import tasks
from tests.support.clock import ShiftedClock
from tests.support.hostile import OTHER_KEY
from tests.support.records import recorded_ids

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')

QUEUE = 'tq-default'


@pytest.fixture
def app(app, pool):
    """The test app (in-memory transport, FakeClock), its workers on each pool in turn."""
    return app.replace(WORKER_POOL=pool)


def received(app, message_id, receive_count, unsettled=0):
    message = kale_message.Message('task-' + message_id, 'tests.tasks.RecordTask',
                                   unsettled=unsettled)
    body = app.codec.encode(message, QUEUE).body
    return ReceivedMessage(message_id, 'handle-' + message_id, body, {}, receive_count), message


def batch_of(app, *items):
    batch = Batch(app.queues['default'], [r for r, _ in items], time.monotonic(), QUEUE)
    batch.opened = {r.message_id: Opened(app.codec.open(r.body, QUEUE), tasks.RecordTask)
                    for r, _ in items}
    return batch


def test_unsettled_deliveries_add_the_copy_history_to_the_receive_count(app):
    first, message = received(app, 'a', 3, unsettled=2)
    assert unsettled_deliveries(first, message.unsettled) == 4


def test_the_message_left_unsettled_most_often_runs_alone(app):
    fresh, often, once = received(app, 'fresh', 1), received(app, 'often', 3), received(app, 'once', 2)
    batch = batch_of(app, fresh, often, once)
    alone = isolate_suspect(batch)
    assert [m.message_id for m in alone.messages] == ['often']
    assert [m.message_id for m in batch.messages] == ['fresh', 'once']
    [waiting] = batch.settlements
    assert waiting.outcome is Outcome.RELEASE and waiting.received.message_id == 'once'
    copy = release_copy(waiting.received, QUEUE, app.codec, waiting.envelope)
    assert app.codec.decode(copy.body, QUEUE).unsettled == 1    # its history travels along


def test_a_release_copy_carries_the_history_of_unsettled_deliveries(app):
    codec = app.codec
    fresh, _ = received(app, 'fresh', 1)
    copy = codec.decode(release_copy(fresh, QUEUE, codec).body, QUEUE)
    assert (copy.task_id, copy.unsettled) == ('task-fresh', 0)
    twice, _message = received(app, 'twice', 3, unsettled=1)
    assert codec.decode(release_copy(twice, QUEUE, codec).body, QUEUE).unsettled == 3
    garbage = ReceivedMessage('g', 'h', 'not kale', {'kale_retry_num': '2'}, 4)
    assert release_copy(garbage, QUEUE, codec).body == 'not kale'
    assert release_copy(garbage, QUEUE, codec).attributes == {'kale_retry_num': 2}


def test_a_release_copy_never_sends_an_old_key_body_back_unchanged(app):
    old, message = received(app.replace(MESSAGE_SIGNING_KEY=OTHER_KEY), 'old', 1)
    copy = release_copy(old, QUEUE, app.replace(MESSAGE_SIGNING_OLD_KEYS=[OTHER_KEY]).codec)
    assert copy.body != old.body
    # the current key alone verifies it
    assert app.codec.decode(copy.body, QUEUE).task_id == message.task_id


def test_a_release_copy_keeps_the_first_issue_time(app):
    message = kale_message.Message('t', 'tests.tasks.RecordTask', published_at=time.time() - 3600)
    body = app.codec.encode(message, QUEUE).body
    copy = release_copy(ReceivedMessage('m', 'h', body, {}, 2), QUEUE, app.codec)
    opened = app.codec.open(copy.body, QUEUE)
    assert opened.published_at == int(message.published_at)


def test_a_batch_without_suspects_is_left_alone(app):
    batch = batch_of(app, received(app, 'a', 1), received(app, 'b', 1))
    assert isolate_suspect(batch) is None
    assert len(batch.messages) == 2 and batch.settlements == []


def test_a_copy_that_carries_history_is_still_a_suspect(app):
    batch = batch_of(app, received(app, 'copy', 1, unsettled=1), received(app, 'b', 1))
    assert [m.message_id for m in isolate_suspect(batch).messages] == ['copy']


def test_released_messages_come_back_with_a_fresh_receive_count(app):
    queue = app.broker.queues['default']
    app.publish(tasks.RecordTask, None)
    consumer = Consumer(app.broker, clock=app.clock)
    for _ in range(3):
        batch = consumer.receive(queue)
        assert [m.receive_count for m in batch.messages] == [1]
        consumer.settle(batch)              # nothing run: released as a fresh copy


class BatchSizes(WorkerHooks):
    def __init__(self):
        self.sizes = []

    def before_batch(self, queue, batch):
        self.sizes.append([m.receive_count for m in batch.unsettled()])


@pytest.fixture
def shifted(app):
    """The test app (on its pool) on the machine's clock, over an in-memory
    transport whose clock the test moves ahead (a ShiftedClock): a worker's
    burst ends only as real time passes (a flight worker waits for events in
    real time and asks the queues' counts again once its clock has moved on,
    which a FakeClock never does by itself)."""
    clock = ShiftedClock()
    return App(app.config, transport=MemoryTransport(clock=clock)), clock


def test_a_worker_runs_each_suspect_alone(tmp_path, monkeypatch, shifted):
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    queue = broker.queues['default']
    ids = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(4)])
    broker.transport.receive(broker.sqs_name(queue), 10, 0, 30)    # a worker died
    clock.offset += 31                                              # holding them
    sizes = BatchSizes()
    Worker(queue_names=['default'], burst=True, app=app, hooks=[sizes]).run()
    ran = recorded_ids(str(tmp_path / 'record'), 'ran')
    assert sorted(ran) == sorted(ids)
    suspect_runs = [size for size in sizes.sizes if any(count > 1 for count in size)]
    assert suspect_runs and all(len(size) == 1 for size in suspect_runs)


def test_a_release_copy_carries_the_attributes_of_its_verified_envelope(app):
    message = kale_message.Message('t-attr', 'tests.tasks.RecordTask', retry_num=2, failure_num=1)
    received = ReceivedMessage('m', 'h', app.codec.encode(message, QUEUE).body, {}, 1)
    assert release_copy(received, QUEUE, app.codec).attributes == {
        'kale_task_id': 't-attr', 'kale_task_name': 'tests.tasks.RecordTask',
        'kale_retry_num': 2, 'kale_failure_num': 1}


def test_a_worker_receives_no_unsigned_attributes(app):
    app.publish(tasks.RecordTask, None)
    consumer = Consumer(app.broker, clock=app.clock)
    [received] = consumer.receive(app.broker.queues['default']).messages
    assert received.attributes == {}


def test_a_receive_that_gave_the_message_back_at_once_does_not_make_it_a_suspect(
        tmp_path, monkeypatch, shifted, caplog, pool):
    """A receive with visibility 0 (the SQS console's "poll for messages")
    counts toward the receive count, but nobody held the message."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    queue = broker.queues['default']
    ids = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(4)])
    broker.transport.receive(broker.sqs_name(queue), 10, 0, 0)     # a peek
    clock.offset += 5                         # less than the 30-second visibility timeout
    sizes = BatchSizes()
    with caplog.at_level('WARNING', logger='kale.worker'):
        Worker(queue_names=['default'], burst=True, app=app, hooks=[sizes]).run()
    assert sorted(recorded_ids(str(tmp_path / 'record'), 'ran')) == sorted(ids)
    # Nobody run alone: all four in one batch, each received twice.
    assert sizes.sizes == [[2, 2, 2, 2]]
    assert 'left unsettled' not in caplog.text


def test_held_deliveries_count_only_receives_that_could_have_been_held_to_their_end():
    def message(count, since):
        return ReceivedMessage('m', 'h', 'body', {}, count, since_first_receive_sec=since)
    assert held_deliveries(message(1, 0.0), 30) == 0
    assert held_deliveries(message(2, 0.3), 30) == 0          # given back at once
    assert held_deliveries(message(2, 30.2), 30) == 1         # held to its end
    assert held_deliveries(message(2, 29.5), 30) == 1         # SQS's clock a little ahead
    assert held_deliveries(message(5, 65.0), 30) == 2         # at most two fit in 65 s
    assert held_deliveries(message(3, None), 30) == 2         # the endpoint did not say


class InFlightAtSuspectStart(WorkerHooks):
    """How many messages of the queue the worker held when each suspect started."""

    def __init__(self, broker):
        self.broker = broker
        self.held = []

    def on_task_started(self, queue, received, message):
        if received.receive_count > 1:
            self.held.append(self.broker.counts(queue).in_flight)


def test_a_suspect_starts_with_no_other_message_held(tmp_path, monkeypatch, shifted):
    """Were others held while a suspect ran, a suspect that kills its worker
    would count a delivery against each of them too, until the redrive
    policy dead-letters innocent tasks."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    queue = broker.queues['default']
    suspect = app.publish(tasks.RecordTask, None, 'suspect')
    broker.transport.receive(broker.sqs_name(queue), 10, 0, 30)    # a worker died
    clock.offset += 31                                              # holding it
    fresh = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(9)])
    hook = InFlightAtSuspectStart(broker)
    Worker(queue_names=['default'], burst=True, app=app, hooks=[hook]).run()
    assert sorted(recorded_ids(str(tmp_path / 'record'), 'ran')) == sorted([suspect, *fresh])
    assert hook.held == [1]


def three_held_suspects(app, clock):
    """Three tasks a worker died holding, delivered again: (queue, task ids)."""
    broker = app.broker
    queue = broker.queues['default']
    ids = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(3)])
    broker.transport.receive(broker.sqs_name(queue), 10, 0, 30)    # a worker died
    clock.offset += 31                                              # holding them
    return queue, ids


def test_a_suspect_is_released_unrun_while_the_others_could_not_be_given_back(
        tmp_path, monkeypatch, shifted):
    """The batch's other suspects are given back first; when SQS refuses
    their copies, the worker still holds them, so the suspect it set aside is
    released, not run (were it a killer, each would count one more delivery)."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    queue, ids = three_held_suspects(app, clock)
    refused = []

    def send_batch(name, messages):
        refused.append(len(messages))
        raise SQSError('SendMessageBatch refused (test)')
    monkeypatch.setattr(broker.transport, 'send_batch', send_batch)
    monkeypatch.setattr(broker.transport, 'send', lambda name, message: send_batch(name, [message]))
    worker = Worker(queue_names=['default'], burst=True, app=app)
    if type(worker).__name__ != 'Worker':
        pytest.skip('serial pool only: a flight worker gives back and starts suspects apart')
    worker.settler = Settler(worker.consumer, clock=worker.clock)
    batch = worker.consumer.receive(queue)                          # all three, again
    assert [m.receive_count for m in batch.messages] == [2, 2, 2]
    worker.runner.guard.setup()                                     # as run() does
    try:
        worker.process(batch)
    finally:
        worker.runner.guard.teardown()
    assert refused                                          # the releases were refused
    assert recorded_ids(str(tmp_path / 'record'), 'ran') == []     # nor was the suspect run
    assert len(ids) == 3 and broker.counts(queue).in_flight == 3


def test_no_suspect_starts_while_sqs_refused_to_take_back_the_others(
        tmp_path, monkeypatch, shifted):
    """On every pool: the batch's other suspects are given back first; while
    SQS refuses their copies the worker still holds them, and the suspect
    does not start. Once SQS delivers them again, all run, each suspect
    with no other message held."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    _, ids = three_held_suspects(app, clock)
    sent, counts = broker.transport.send_batch, broker.transport.counts
    refused = []

    def send_batch(name, messages):
        if not refused:
            refused.append(len(messages))
            raise SQSError('SendMessageBatch refused (test)')
        return sent(name, messages)

    def counts_then_time_out(name):
        found = counts(name)
        if refused and found.in_flight:     # the worker waits on what it holds: SQS lets it go
            clock.offset += 31
        return found
    monkeypatch.setattr(broker.transport, 'send_batch', send_batch)
    monkeypatch.setattr(broker.transport, 'counts', counts_then_time_out)
    hook = InFlightAtSuspectStart(broker)
    worker = Worker(queue_names=['default'], burst=True, app=app, hooks=[hook])
    receive = worker.consumer.receive            # the three together, as they come back
    worker.consumer.receive = lambda queue, wait_sec=None, max_messages=None: receive(
        queue, wait_sec, 10)
    assert worker.run() == 0
    assert refused
    assert sorted(set(recorded_ids(str(tmp_path / 'record'), 'ran'))) == sorted(ids)
    assert hook.held and all(held == 1 for held in hook.held)
