"""What is the memory transport's own: its clock, latency, request log, late
settles, and its reading of AWS where moto differs (the shared behaviour is in
tests/integration/test_transport_contract.py)."""

import pytest

from kale.transport import OutgoingMessage, VisibilityChange
from kale.transport.memory import MemoryTransport
from tests.support.clock import FakeClock, NoSleepClock


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


def test_a_delete_with_a_stale_receipt_handle_succeeds_but_leaves_the_message(transport, clock):
    # AWS (API_DeleteMessage): without the most recent receipt handle "the
    # request succeeds, but the message will not be deleted". moto deletes it.
    send(transport, 'one')
    [stale] = transport.receive('q', 1, 0, 5)
    clock.now += 5
    [latest] = transport.receive('q', 1, 0, 5)
    assert transport.delete_batch('q', [stale.receipt_handle]) == []
    assert transport.counts('q').in_flight == 1
    assert transport.delete_batch('q', [latest.receipt_handle]) == []
    assert transport.counts('q').total == 0


def test_a_visibility_change_with_a_stale_receipt_handle_is_refused(transport, clock):
    # AWS (API_ChangeMessageVisibility): a change after the visibility timeout
    # "might result in an error"; this transport always refuses it (moto accepts).
    send(transport, 'one')
    [stale] = transport.receive('q', 1, 0, 5)
    clock.now += 5
    transport.receive('q', 1, 0, 5)
    change = VisibilityChange(stale.receipt_handle, 0)
    assert transport.change_visibility_batch('q', [change]) == [stale.receipt_handle]
    assert transport.receive('q', 1, 0, 5) == []


def test_latency_is_added_to_every_request():
    clock = NoSleepClock()
    transport = MemoryTransport(latency_sec=0.05, clock=clock)
    transport.ensure_queue('q', 30, None, 0)
    transport.counts('q')
    assert clock.slept == [0.05, 0.05]
    assert sum(transport.requests.values()) == 2


def test_settling_after_the_visibility_timeout_is_counted_as_late(transport, clock):
    send(transport, 'a', 'b')
    first, second = transport.receive('q', 10, 0, 5)
    transport.delete_batch('q', [first.receipt_handle])
    clock.now += 6
    transport.delete_batch('q', [second.receipt_handle])
    assert transport.late_settles == 1


def test_a_delete_with_a_stale_receipt_handle_is_counted_as_late(transport, clock):
    send(transport, 'one')
    [stale] = transport.receive('q', 1, 0, 5)
    clock.now += 5
    transport.receive('q', 1, 0, 5)
    transport.delete_batch('q', [stale.receipt_handle])
    assert transport.late_settles == 1


def test_every_request_is_reported(clock):
    seen = []
    transport = MemoryTransport(clock=clock, on_request=seen.append)
    transport.ensure_queue('q', 30, None, 0)
    send(transport, *['m%d' % i for i in range(12)])
    transport.receive('q', 10, 0, 30)
    assert seen == ['CreateQueue', 'SendMessageBatch', 'SendMessageBatch', 'ReceiveMessage']


@pytest.mark.real_time('a long poll on a FakeClock ends after its seconds of real waiting')
def test_a_long_poll_on_a_clock_that_stands_still_ends_after_its_wait(transport):
    import time
    started = time.monotonic()
    assert transport.receive('q', 10, 1, 30) == []          # the FakeClock never moves
    assert 0.9 <= time.monotonic() - started < 5
