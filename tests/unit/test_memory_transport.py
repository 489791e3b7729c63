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
    # (a poll that waited for the FakeClock would never end; a loaded machine
    # may stretch its second of waiting by a few)
    assert 0.9 <= time.monotonic() - started < 10


# --- LocalStack's FIFO queues (localstack_fifo) ------------------------------------------------

@pytest.fixture(params=[False, True], ids=['sqs', 'localstack'])
def fifo(request, clock):
    """A memory transport with a FIFO queue 'q.fifo', its FIFO queues as
    SQS's or (localstack_fifo) as LocalStack's; ``fifo.localstack`` says which."""
    t = MemoryTransport(clock=clock, localstack_fifo=request.param)
    t.ensure_queue('q.fifo', 30, None, 0)
    t.localstack = request.param
    return t


def in_group(transport, *bodies, group='a'):
    transport.send_batch('q.fifo', [OutgoingMessage(b, group_id=group, dedup_id=b)
                                    for b in bodies])


def hold(transport, received, *seconds):
    """Change each received message's visibility to the matching ``seconds``."""
    assert transport.change_visibility_batch('q.fifo', [
        VisibilityChange(m.receipt_handle, s) for m, s in zip(received, seconds, strict=True)]) == []


def bodies(transport):
    return [m.body for m in transport.receive('q.fifo', 10, 0, 30)]


def test_localstack_delivers_a_message_made_visible_by_a_change_to_0_before_a_held_earlier_one(
        fifo):
    in_group(fifo, 'a1', 'a2', 'a3')
    received = fifo.receive('q.fifo', 10, 0, 30)
    hold(fifo, received, 1, 0, 0)
    assert bodies(fifo) == (['a2', 'a3'] if fifo.localstack else []), \
        'SQS holds the group back while a1 is held'


def test_localstack_puts_messages_whose_timeout_ended_back_in_receive_order(fifo, clock):
    """Held 2 s, and the rest of its group 1 s: a second later the group is
    still held back by a1, on both."""
    in_group(fifo, 'a1', 'a2', 'a3')
    received = fifo.receive('q.fifo', 10, 0, 30)
    hold(fifo, received, 2, 1, 1)
    clock.advance(1.5)
    assert bodies(fifo) == []
    clock.advance(1)
    assert bodies(fifo) == ['a1', 'a2', 'a3']


def test_localstack_puts_nothing_back_behind_a_message_received_earlier_and_still_held(
        fifo, clock):
    """LocalStack's walk over the messages in flight stops at the first one
    still invisible, of any group: b1, received first, holds back a1."""
    in_group(fifo, 'b1', group='b')
    [b1] = fifo.receive('q.fifo', 10, 0, 30)
    in_group(fifo, 'a1')
    [a1] = fifo.receive('q.fifo', 10, 0, 30)
    hold(fifo, [a1], 1)
    clock.advance(2)
    assert bodies(fifo) == ([] if fifo.localstack else ['a1'])
    assert fifo.delete_batch('q.fifo', [b1.receipt_handle]) == []
    assert bodies(fifo) == (['a1'] if fifo.localstack else [])


def test_localstack_unblocks_a_group_when_a_message_of_it_is_put_back_or_its_last_deleted(
        fifo, clock):
    in_group(fifo, 'a1', 'a2')
    first = fifo.receive('q.fifo', 1, 0, 30)
    in_group(fifo, 'a3')
    assert bodies(fifo) == [], 'a message sent while its group is in flight waits'
    assert fifo.delete_batch('q.fifo', [first[0].receipt_handle]) == []
    assert bodies(fifo) == ['a2', 'a3']


def test_localstack_ignores_a_visibility_change_of_a_message_put_back(fifo, clock):
    in_group(fifo, 'a1')
    [a1] = fifo.receive('q.fifo', 10, 0, 30)
    hold(fifo, [a1], 0)
    hold(fifo, [a1], 30)
    assert bodies(fifo) == (['a1'] if fifo.localstack else [])
