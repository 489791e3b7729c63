"""The in-memory transport behaves like SQS where the worker depends on it."""
import threading
import time

import pytest

from kale.exceptions import QueueNotFoundError, SQSError
from kale.transport import OutgoingMessage, VisibilityChange
from kale.transport.memory import MemoryTransport


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def transport(clock):
    t = MemoryTransport(clock=clock)
    t.ensure_queue('q', 30, 'dlq-q', 3)
    return t


def send(transport, *bodies, delay=0):
    return transport.send_batch('q', [OutgoingMessage(b, {'a': 1}, delay) for b in bodies])


def test_received_messages_are_invisible_until_their_timeout(transport, clock):
    send(transport, 'one')
    [message] = transport.receive('q', 10, 0, 30)
    assert message.body == 'one' and message.attributes == {'a': '1'}
    assert transport.receive('q', 10, 0, 30) == []
    clock.now += 30
    [again] = transport.receive('q', 10, 0, 30)
    assert again.receive_count == 2
    assert again.receipt_handle != message.receipt_handle


def test_delete_needs_the_latest_receipt_handle(transport, clock):
    send(transport, 'one')
    [first] = transport.receive('q', 1, 0, 5)
    clock.now += 5
    [second] = transport.receive('q', 1, 0, 5)
    assert transport.delete_batch('q', [first.receipt_handle]) == [first.receipt_handle]
    assert transport.delete_batch('q', [second.receipt_handle]) == []
    assert transport.counts('q').total == 0


def test_release_makes_a_message_visible_at_once(transport):
    send(transport, 'one')
    [message] = transport.receive('q', 1, 0, 30)
    assert transport.change_visibility_batch('q', [VisibilityChange(message.receipt_handle, 0)]) == []
    assert [m.body for m in transport.receive('q', 1, 0, 30)] == ['one']


def test_delayed_messages_appear_after_their_delay(transport, clock):
    send(transport, 'later', delay=10)
    assert transport.counts('q').delayed == 1
    assert transport.receive('q', 10, 0, 30) == []
    clock.now += 10
    assert [m.body for m in transport.receive('q', 10, 0, 30)] == ['later']


def test_counts_split_visible_in_flight_and_delayed(transport):
    send(transport, 'a', 'b')
    send(transport, 'c', delay=60)
    transport.receive('q', 1, 0, 30)
    counts = transport.counts('q')
    assert (counts.visible, counts.in_flight, counts.delayed) == (1, 1, 1)


def test_batches_are_limited_to_ten(transport):
    send(transport, *['m%d' % i for i in range(25)])
    assert transport.requests['SendMessageBatch'] == 3
    assert len(transport.receive('q', 10, 0, 30)) == 10
    with pytest.raises(SQSError, match='1..10'):
        transport.receive('q', 11, 0, 30)


def test_redrive_moves_a_message_received_too_often(transport, clock):
    send(transport, 'poison')
    for _ in range(3):
        assert len(transport.receive('q', 1, 0, 5)) == 1
        clock.now += 5
    assert transport.receive('q', 1, 0, 5) == []
    [dead] = transport.receive('dlq-q', 1, 0, 5)
    assert dead.body == 'poison'


def test_long_poll_returns_when_a_message_arrives():
    transport = MemoryTransport()
    transport.ensure_queue('q', 30, None, 0)
    threading.Timer(0.2, lambda: transport.send('q', OutgoingMessage('hi'))).start()
    started = time.monotonic()
    [message] = transport.receive('q', 10, 5, 30)
    assert message.body == 'hi'
    assert 0.15 < time.monotonic() - started < 1.0


def test_unknown_queue_is_queue_not_found(transport):
    with pytest.raises(QueueNotFoundError):
        transport.send('nope', OutgoingMessage('x'))
    assert not transport.queue_exists('nope')


def test_latency_is_added_to_every_request():
    transport = MemoryTransport(latency_sec=0.05)
    started = time.monotonic()
    transport.ensure_queue('q', 30, None, 0)
    transport.counts('q')
    assert time.monotonic() - started >= 0.1
    assert sum(transport.requests.values()) == 2


def test_settling_after_the_visibility_timeout_is_counted_as_late(transport, clock):
    send(transport, 'a', 'b')
    first, second = transport.receive('q', 10, 0, 5)
    transport.delete_batch('q', [first.receipt_handle])
    clock.now += 6
    transport.delete_batch('q', [second.receipt_handle])
    assert transport.late_settles == 1


def test_every_request_is_reported(clock):
    seen = []
    transport = MemoryTransport(clock=clock, on_request=seen.append)
    transport.ensure_queue('q', 30, None, 0)
    send(transport, *['m%d' % i for i in range(12)])
    transport.receive('q', 10, 0, 30)
    assert seen == ['CreateQueue', 'SendMessageBatch', 'SendMessageBatch', 'ReceiveMessage']
