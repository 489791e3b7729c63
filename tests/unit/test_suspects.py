"""Messages a worker died holding run again at once after one death, alone
after two; releases never count toward redrive."""
import collections
import time

import pytest

from kale import message as kale_message
from kale.app import App
from kale.events import Outcome
from kale.exceptions import SQSError
from kale.hooks import WorkerHooks
from kale.ids import random_id
from kale.transport import ReceivedMessage
from kale.transport.memory import MemoryTransport
from kale.worker import Worker
from kale.worker.batch import Batch, Opened
from kale.worker.caps import SuspectCaps
from kale.worker.consumer import Consumer
from kale.worker.jobs import Job
from kale.worker.suspects import (
    ALONE_AFTER,
    LAST_RECEIVE,
    group_cap,
    held_deliveries,
    release_copy,
    suspects_of,
    unsettled_deliveries,
)
from tests import tasks
from tests.support.clock import ShiftedClock
from tests.support.hostile import OTHER_KEY
from tests.support.killed import Killable
from tests.support.records import recorded_ids

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')

QUEUE = 'tq-default'


@pytest.fixture
def app(app, pool):
    """The test app (in-memory transport, FakeClock), its workers on each pool in turn."""
    return app.replace(WORKER_POOL=pool)


def received(app, message_id, receive_count, unsettled=0, since=None):
    message = kale_message.Message('task-' + message_id, 'tests.tasks.RecordTask',
                                   unsettled=unsettled)
    body = app.codec.encode(message, QUEUE).body
    return ReceivedMessage(message_id, 'handle-' + message_id, body, {}, receive_count,
                           since_first_receive_sec=since), message


def batch_of(app, *items):
    batch = Batch(app.queues['default'], [r for r, _ in items], time.monotonic(), QUEUE)
    batch.opened = {r.message_id: Opened(app.codec.open(r.body, QUEUE), tasks.RecordTask)
                    for r, _ in items}
    return batch


def test_unsettled_deliveries_add_the_copy_history_to_the_receive_count(app):
    first, message = received(app, 'a', 3, unsettled=2)
    assert unsettled_deliveries(first, message.unsettled) == 4


def test_a_message_seen_at_more_than_one_death_runs_alone():
    assert ALONE_AFTER == 2
    assert [group_cap(rounds) for rounds in range(0, 5)] == [0, 0, 1, 1, 1]


def held(batch, redrive_after=0):
    """What a worker holding the batch keeps, as it does (its suspects' caps,
    nothing running yet): the ids it keeps, most bound first, and those it
    gives back with why; None when the batch holds no suspect."""
    suspects = suspects_of(batch, redrive_after)
    if not suspects:
        return None
    caps = SuspectCaps('worker')
    jobs = [Job(batch, r, batch.opened[r.message_id]) for r in batch.messages]
    caps.hold(batch, jobs, suspects)
    kept, back = caps.over(jobs, 0)
    return ([job.received.message_id for job in kept],
            [(job.received.message_id, reason) for job, reason in back])


def test_a_message_on_its_last_receive_is_given_back_unless_it_runs_alone_anyway(app):
    """A death now, its own doing or another's, would make SQS dead-letter
    it: it is given back, its copy's receive count starting anew. One left
    unsettled often enough to run alone runs (a killer goes on to SQS's
    redrive policy)."""
    # Received ten times, held to the end of its visibility timeout once.
    last, fresh = received(app, 'last', 10, since=35), received(app, 'fresh', 1)
    assert held(batch_of(app, last, fresh), redrive_after=10) == (
        ['fresh'], [('last', LAST_RECEIVE)])
    alone = batch_of(app, received(app, 'alone', 10, unsettled=7, since=65))
    assert held(alone, redrive_after=10) == (['alone'], [])
    before = batch_of(app, received(app, 'before', 8, since=35), received(app, 'fresh', 1))
    assert held(before, redrive_after=10) is None           # one death: it runs with the rest


def test_the_receive_before_the_last_counts_as_the_last(app):
    """A delivery can lapse unrun (a batch received just before an outage),
    using a receive no worker sees: a message beside a killer is given back
    one receive early, so a lapse then leaves it one more."""
    slack = batch_of(app, received(app, 'slack', 9, since=35), received(app, 'fresh', 1))
    assert held(slack, redrive_after=10) == (['fresh'], [('slack', LAST_RECEIVE)])
    third = batch_of(app, received(app, 'third', 3, since=35), received(app, 'fresh', 1))
    assert held(third, redrive_after=4) == (['fresh'], [('third', LAST_RECEIVE)])
    second = batch_of(app, received(app, 'second', 2, since=65), received(app, 'fresh', 1))
    assert held(second, redrive_after=4) is None          # two receives left: it runs


def test_a_message_left_unsettled_twice_runs_alone(app):
    fresh, twice, once = received(app, 'fresh', 1), received(app, 'twice', 2, unsettled=1), \
        received(app, 'once', 2)
    batch = batch_of(app, fresh, twice, once)
    kept, back = held(batch)
    assert kept == ['twice']
    assert sorted(message_id for message_id, _ in back) == ['fresh', 'once']
    [once_received] = [r for r in batch.messages if r.message_id == 'once']
    copy = release_copy(once_received, QUEUE, app.codec, batch.opened['once'].envelope)
    assert app.codec.decode(copy.body, QUEUE).unsettled == 1    # its history travels along


def test_messages_left_unsettled_once_run_together_with_the_rest(app):
    """One death (a kill -9, a deploy) says nothing of a message: what the
    dead worker held runs again at once, at full speed."""
    fresh, once, copy = received(app, 'fresh', 1), received(app, 'once', 2), \
        received(app, 'copy', 1, unsettled=1)
    assert held(batch_of(app, fresh, once, copy)) is None


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
    assert held(batch) is None
    assert len(batch.messages) == 2 and batch.settlements == []


def test_a_copy_that_carries_history_is_still_a_suspect(app):
    batch = batch_of(app, received(app, 'copy', 1, unsettled=2), received(app, 'b', 1))
    assert [suspect.received.message_id for suspect in suspects_of(batch)] == ['copy']


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


def send_tasks(app, count, rounds=1, task_class=tasks.RecordTask, **kwargs):
    """Send ``count`` tasks, each left unsettled ``rounds - 1`` times before
    (carried in its envelope, as a copy carries it): their task ids."""
    broker = app.broker
    queue = broker.queues['default']
    name = broker.sqs_name(queue)
    messages = [kale_message.Message(random_id(), task_class.task_path(), (i,), kwargs,
                                     unsettled=rounds - 1) for i in range(count)]
    for start in range(0, count, 10):
        broker.send(queue, [app.codec.to_outgoing(m, name) for m in messages[start:start + 10]])
    return [m.task_id for m in messages]


def a_worker_dies_holding_them(app, clock):
    """A worker receives every message of the queue and dies holding them."""
    broker = app.broker
    while broker.transport.receive(broker.sqs_name(broker.queues['default']), 10, 0, 30):
        pass
    clock.offset += 31                  # their visibility timeout ends


def held_by_a_dead_worker(app, clock, count, rounds=1, task_class=tasks.RecordTask):
    """``count`` tasks a worker died holding, each left unsettled ``rounds``
    times in all: their task ids, in publish order."""
    ids = send_tasks(app, count, rounds, task_class)
    a_worker_dies_holding_them(app, clock)
    return ids


class InFlightAtSuspectStart(WorkerHooks):
    """How many messages of the queue the worker held when each suspect
    delivered again started (``copies``: released copies of suspects too)."""

    def __init__(self, broker, copies=False):
        self.broker = broker
        self.copies = copies
        self.held = []

    def on_task_started(self, queue, received, message):
        if received.receive_count > 1 or (self.copies and message.unsettled):
            self.held.append(self.broker.counts(queue).in_flight)


def test_messages_a_dead_worker_held_run_together_not_one_at_a_time(
        tmp_path, monkeypatch, shifted):
    """Forty tasks left unsettled once (their worker was killed) run in
    groups as large as the pool takes: no send-back, a few batches, many
    held at once; each task runs once."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    ids = held_by_a_dead_worker(app, clock, 40)
    sizes, hook = BatchSizes(), InFlightAtSuspectStart(app.broker)
    worker = Worker(queue_names=['default'], burst=True, app=app, hooks=[sizes, hook])
    if worker.prefetch is not None:       # the serial worker: no blind batch gives back
        worker.prefetch.window_sec = 3600  # what a loaded machine did not start within 1 s
    assert worker.run() == 0
    assert sorted(recorded_ids(str(tmp_path / 'record'), 'ran')) == sorted(ids)
    assert worker.stats.get('release', 0) == 0                      # none sent back
    assert len(sizes.sizes) <= len(ids) // 4
    assert len(hook.held) == len(ids) and max(hook.held) >= 10      # together


def test_a_worker_runs_each_suspect_left_unsettled_often_alone(tmp_path, monkeypatch, shifted):
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    ids = held_by_a_dead_worker(app, clock, 4, rounds=ALONE_AFTER)
    hook = InFlightAtSuspectStart(app.broker, copies=True)
    Worker(queue_names=['default'], burst=True, app=app, hooks=[hook]).run()
    assert sorted(recorded_ids(str(tmp_path / 'record'), 'ran')) == sorted(ids)
    assert hook.held == [1, 1, 1, 1]


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


def test_a_suspect_starts_with_no_other_message_held(tmp_path, monkeypatch, shifted):
    """Were others held while a suspect ran, a suspect that kills its worker
    would count a delivery against each of them too, until the redrive
    policy dead-letters innocent tasks."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    broker = app.broker
    [suspect] = held_by_a_dead_worker(app, clock, 1, rounds=ALONE_AFTER)     # it runs alone
    fresh = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(9)])
    hook = InFlightAtSuspectStart(broker)
    Worker(queue_names=['default'], burst=True, app=app, hooks=[hook]).run()
    assert sorted(recorded_ids(str(tmp_path / 'record'), 'ran')) == sorted([suspect, *fresh])
    assert hook.held == [1]


def three_held_suspects(app, clock):
    """Three tasks a worker died holding, left unsettled often enough to run
    alone each, delivered again: (queue, task ids)."""
    return app.broker.queues['default'], held_by_a_dead_worker(app, clock, 3, rounds=ALONE_AFTER)


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


class Succeeded(WorkerHooks):
    """Each successful run: its task id and the receipt handle of its delivery."""

    def __init__(self):
        self.runs = []

    def on_task_finished(self, settlement):
        if settlement.outcome is Outcome.SUCCEEDED:
            self.runs.append((settlement.task_id, settlement.received.receipt_handle))


def test_a_poison_among_them_is_dead_lettered_and_every_innocent_runs_once(
        tmp_path, monkeypatch, shifted):
    """Thirty tasks and one that kills its worker every time it runs (a
    fifth of a second in), all held by a worker that died: workers die until
    SQS's redrive policy dead-letters the poison. No innocent is
    dead-lettered with it, each one's run is settled once, and hardly any is
    sent back to get there (each run alone, most of them were, many times)."""
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    app, clock = shifted
    config = app.replace(MAX_RECEIVE_COUNT=4).config
    app = App(config, transport=app.broker.transport)
    innocents = send_tasks(app, 15)
    [poison] = send_tasks(app, 1, task_class=tasks.PoisonTask, pause_sec=0.2)
    innocents += send_tasks(app, 15)
    a_worker_dies_holding_them(app, clock)
    succeeded, lives, sent_back = Succeeded(), [], 0
    while len(lives) < 20:
        life = Killable.current = Killable(app.broker.transport)
        worker = Worker(queue_names=['default'], burst=True, hooks=[succeeded],
                        app=App(config, transport=life))
        if worker.prefetch is not None:     # the serial worker: what is sent back
            worker.prefetch.window_sec = 3600  # is the suspects' doing, no blind batch's
        worker.run()
        lives.append(life)
        sent_back += worker.stats.get('release', 0)
        if not life.dead:
            break                       # it drained the queue
        clock.offset += 31              # what it held comes back
    assert not lives[-1].dead, 'the poison still kills workers after %d lives' % len(lives)
    queue = app.broker.queues['default']
    dead = app.broker.transport.receive(app.broker.dead_letter_name(queue), 10, 0, 30)
    assert [app.codec.open(m.body, '', check_age=False).task_id for m in dead] == [poison]
    deleted = set().union(*(life.deleted for life in lives))
    settled_runs = collections.Counter(task_id for task_id, handle in succeeded.runs
                                       if handle in deleted)
    assert {task_id: settled_runs[task_id] for task_id in innocents} == \
        dict.fromkeys(innocents, 1)
    assert app.broker.counts(queue).total == 0
    # Each run alone, many were sent back many times: 258-269. How many go
    # back now depends on where each kill falls among the runs, which a
    # loaded machine moves (33 to 57 seen with six such tests at once).
    assert sent_back <= 3 * len(innocents)
