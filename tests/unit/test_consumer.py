"""Settling: copies are sent before originals are deleted; nothing is lost."""
import time

from kale.conf import settings
from kale.events import Outcome, Settlement
from kale.exceptions import BatchSendError, EndpointUnreachableError, SQSError
from kale.queue_config import build_queue_config
from kale.transport import OutgoingMessage
from kale.worker.batch import Batch
from kale.worker.consumer import COPY_MIN_SEC, Consumer
from tests import tasks
from tests.support.clock import FakeClock, NoSleepClock


class RecordingBroker:
    """Wraps a broker, recording each call and optionally failing some."""

    def __init__(self, broker, failures=None):
        self.broker = broker
        self.calls = []
        self.failures = dict(failures or {})

    def __getattr__(self, name):
        return getattr(self.broker, name)

    def _call(self, name, *args):
        self.calls.append(name)
        failure = self.failures.get(name)
        if failure:
            if isinstance(failure, list):
                error = failure.pop(0)
                if not failure:
                    del self.failures[name]
            else:
                error = failure
            raise error
        return getattr(self.broker, name)(*args)

    def send(self, *args):
        return self._call('send', *args)

    def send_dead_letters(self, *args):
        return self._call('send_dead_letters', *args)

    def delete(self, *args):
        return self._call('delete', *args)

    def release(self, *args):
        return self._call('release', *args)


def received_batch(memory_broker, count):
    queue = build_queue_config(settings.config)['default']
    tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(count)])
    return Batch(queue, memory_broker.receive(queue), time.monotonic(),
                 memory_broker.sqs_name(queue))


def copy_of(received):
    return OutgoingMessage(received.body + '-copy', {}, 0)


def test_settle_copies_then_deletes_and_releases_unstarted_as_fresh_copies(memory_broker):
    batch = received_batch(memory_broker, 4)
    ok, retry, dead, unstarted = batch.messages
    batch.settlements = [Settlement(ok, Outcome.SUCCEEDED),
                         Settlement(retry, Outcome.RETRY, copy=copy_of(retry)),
                         Settlement(dead, Outcome.DEAD_LETTER, copy=copy_of(dead), reason='x')]
    recording = RecordingBroker(memory_broker)
    Consumer(recording).settle(batch)
    assert recording.calls == ['send', 'send_dead_letters', 'delete']
    assert [s.outcome for s in batch.settlements][-1] is Outcome.RELEASE
    assert all(s.settled for s in batch.settlements)
    queue = batch.queue
    bodies = {m.body for m in memory_broker.receive(queue)}
    assert bodies == {unstarted.body, retry.body + '-copy'}
    dlq = memory_broker.transport.receive(memory_broker.dead_letter_name(queue), 10, 0, 30)
    assert [m.body for m in dlq] == [dead.body + '-copy']


def test_a_failed_copy_leaves_its_original_queued(memory_broker):
    batch = received_batch(memory_broker, 2)
    first, second = batch.messages
    batch.settlements = [Settlement(first, Outcome.RETRY, copy=copy_of(first)),
                         Settlement(second, Outcome.RETRY, copy=copy_of(second))]
    partial = BatchSendError('one failed', {1: ('InternalError', 'x')}, ['id0', None])
    recording = RecordingBroker(memory_broker, {'send': partial})
    Consumer(recording).settle(batch)
    assert batch.settlements[0].settled and not batch.settlements[1].settled
    counts = memory_broker.counts(batch.queue)
    assert counts.in_flight == 1      # second's original: reappears after its timeout


def test_a_copy_send_that_fails_outright_deletes_nothing(memory_broker):
    batch = received_batch(memory_broker, 1)
    [only] = batch.messages
    batch.settlements = [Settlement(only, Outcome.DEAD_LETTER, copy=copy_of(only))]
    recording = RecordingBroker(memory_broker, {'send_dead_letters': SQSError('denied', 'AccessDenied')})
    Consumer(recording).settle(batch)
    assert 'delete' not in recording.calls
    assert memory_broker.counts(batch.queue).in_flight == 1


def test_outages_are_retried_with_backoff_until_they_pass(memory_broker):
    batch = received_batch(memory_broker, 1)
    [only] = batch.messages
    batch.settlements = [Settlement(only, Outcome.SUCCEEDED)]
    outage = [EndpointUnreachableError('down'), EndpointUnreachableError('down')]
    recording = RecordingBroker(memory_broker, {'delete': outage})
    clock = NoSleepClock()
    Consumer(recording, clock=clock).settle(batch)
    pauses = clock.slept
    assert recording.calls == ['delete', 'delete', 'delete']
    assert len(pauses) == 2 and pauses[1] > pauses[0]
    assert memory_broker.counts(batch.queue).total == 0


def test_outages_are_not_retried_past_the_batch_deadline(memory_broker):
    batch = received_batch(memory_broker, 1)
    batch.received_at -= batch.queue.visibility_timeout_sec     # already expired
    batch.settlements = [Settlement(batch.messages[0], Outcome.SUCCEEDED)]
    recording = RecordingBroker(memory_broker, {'delete': EndpointUnreachableError('down')})
    Consumer(recording, clock=NoSleepClock()).settle(batch)
    assert recording.calls == ['delete']
    assert not batch.settlements[0].settled


def test_without_dead_letter_queues_permanent_failures_are_deleted(memory_broker):
    memory_broker.dead_letters = False
    batch = received_batch(memory_broker, 1)
    [only] = batch.messages
    batch.settlements = [Settlement(only, Outcome.DEAD_LETTER, copy=copy_of(only), reason='x')]
    recording = RecordingBroker(memory_broker)
    Consumer(recording).settle(batch)
    assert recording.calls == ['delete']
    assert memory_broker.counts(batch.queue).total == 0


def test_a_stopping_consumer_gives_up_before_the_deadline(memory_broker):
    batch = received_batch(memory_broker, 1)       # 30 s of budget left
    batch.settlements = [Settlement(batch.messages[0], Outcome.SUCCEEDED)]
    recording = RecordingBroker(memory_broker, {'delete': EndpointUnreachableError('down')})
    consumer = Consumer(recording, clock=NoSleepClock())
    consumer.give_up_at = time.monotonic()         # stopping: no more retries
    consumer.settle(batch)
    assert recording.calls == ['delete']
    assert not batch.settlements[0].settled


def clocked_batch(count, clock):
    """A broker over a memory transport on ``clock``, and a batch of ``count``
    tasks received from it at ``clock()``."""
    from kale import publisher
    from kale.broker import Broker
    from kale.transport.memory import MemoryTransport
    broker = Broker(MemoryTransport(clock=clock), build_queue_config(settings.config), config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker))
    try:
        tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(count)])
    finally:
        publisher.set_publisher(previous)
    queue = build_queue_config(settings.config)['default']
    return broker, Batch(queue, broker.receive(queue), clock(), broker.sqs_name(queue))


def test_a_message_whose_budget_lapsed_is_never_copied_but_left_to_sqs():
    clock = FakeClock()
    broker, batch = clocked_batch(3, clock)
    unstarted, retried, dead = batch.messages
    batch.settlements = [Settlement(retried, Outcome.RETRY, copy=copy_of(retried)),
                         Settlement(dead, Outcome.DEAD_LETTER, copy=copy_of(dead), reason='x')]
    clock.advance(batch.queue.visibility_timeout_sec + 1)      # SQS may have redelivered them
    recording = RecordingBroker(broker)
    Consumer(recording, clock=clock).settle(batch)
    assert recording.calls == []                 # no copy, no delete, no visibility change
    assert all(s.lapsed and not s.settled for s in batch.settlements)
    again = broker.receive(batch.queue)          # each original comes back, once, unchanged
    assert sorted(m.body for m in again) == sorted(m.body for m in (unstarted, retried, dead))
    assert all(m.receive_count == 2 for m in again)


def test_an_unstarted_message_with_too_little_budget_left_is_made_visible_not_copied():
    clock = FakeClock()
    broker, batch = clocked_batch(1, clock)
    [unstarted] = batch.messages
    clock.advance(batch.queue.visibility_timeout_sec - COPY_MIN_SEC / 2)
    recording = RecordingBroker(broker)
    Consumer(recording, clock=clock).settle(batch)
    assert broker.transport.requests['ChangeMessageVisibilityBatch'] == 1
    assert 'send' not in recording.calls and 'delete' not in recording.calls
    [settlement] = batch.settlements
    assert settlement.settled and not settlement.lapsed
    [again] = broker.receive(batch.queue)        # visible at once, the original itself
    assert again.message_id == unstarted.message_id


def test_a_copy_send_is_not_retried_into_the_end_of_the_budget():
    clock = FakeClock()
    broker, batch = clocked_batch(1, clock)
    [retried] = batch.messages
    batch.settlements = [Settlement(retried, Outcome.RETRY, copy=copy_of(retried))]
    clock.advance(batch.queue.visibility_timeout_sec - COPY_MIN_SEC - 0.2)
    recording = RecordingBroker(broker, {'send': EndpointUnreachableError('down')})
    Consumer(recording, clock=clock).settle(batch)
    assert recording.calls == ['send']           # the next try would end too near the deadline
    assert not batch.settlements[0].copied and not batch.settlements[0].settled


def test_deletes_sqs_failed_are_tried_again_while_the_budget_lasts(memory_broker):
    """Regression (the chaos run's partial-batch scenario): a delete entry SQS
    failed on its side was not tried again, so its task ran twice."""
    batch = received_batch(memory_broker, 3)
    batch.settlements = [Settlement(m, Outcome.SUCCEEDED) for m in batch.messages]
    real_delete = memory_broker.delete
    calls = []

    def flaky_delete(queue, handles):
        calls.append(list(handles))
        failing = list(handles[:1]) if len(calls) <= 2 else []
        real_delete(queue, [h for h in handles if h not in failing])
        return failing
    memory_broker.delete = flaky_delete
    clock = NoSleepClock()
    Consumer(memory_broker, clock=clock).settle(batch)
    assert len(calls) == 3 and all(s.settled for s in batch.settlements)
    assert memory_broker.counts(batch.queue).total == 0 and len(clock.slept) == 2
