"""The transport contract: every test runs against both transports.

``memory`` is :class:`MemoryTransport`; ``sqs`` is :class:`SQSTransport` on
the embedded endpoint (moto). Where the two could differ, moto is the
reference, except where moto departs from the behaviour AWS documents for SQS
(docs.aws.amazon.com): there the test asserts only what AWS promises, and
tests/unit/test_memory_transport.py pins the AWS reading in the memory transport.
Real SQS may return fewer messages than are available on a short poll; both
transports here return as many as they can, and the tests rely on that.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable, Optional, TypeVar

import pytest

from kale.conf import settings
from kale.exceptions import QueueNotFoundError, SQSError
from kale.transport import OutgoingMessage, ReceivedMessage, Transport, VisibilityChange
from kale.transport.memory import MemoryTransport
from kale.transport.sqs import SQSTransport
from tests.support.endpoint import raw_client

T = TypeVar('T')

#: Long enough that a long poll that returns early is told apart from one that
#: waits it out, even on a loaded machine.
LONG_POLL_SEC = 20
#: How long a test waits for something that should happen in about a second.
PATIENCE_SEC = 15


@pytest.fixture(scope='session')
def sqs_client(sqs_endpoint: str) -> Any:
    return raw_client(sqs_endpoint)


@pytest.fixture(params=['memory', 'sqs'])
def transport(request: pytest.FixtureRequest) -> Transport:
    if request.param == 'memory':
        return MemoryTransport()
    return SQSTransport(request.getfixturevalue('sqs_client'), config=settings.config)


@pytest.fixture
def name() -> Callable[[str], str]:
    """Queue names of this test's own (the endpoint is shared by the session)."""
    prefix = 'contract-%s-' % uuid.uuid4().hex[:12]
    return lambda suffix: prefix + suffix


@pytest.fixture
def queue(transport: Transport, name: Callable[[str], str]) -> str:
    """A queue without a dead-letter queue."""
    queue = name('q')
    transport.ensure_queue(queue, 30, None, 0)
    return queue


def eventually(condition: Callable[[], Optional[T]], what: str,
               timeout: float = PATIENCE_SEC) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError('%s: not within %s s' % (what, timeout))
        time.sleep(0.05)


def receive_all(transport: Transport, queue: str, expected: int,
                visibility_timeout_sec: int = 30) -> list[ReceivedMessage]:
    """Receive until ``expected`` messages have come (short polls)."""
    found: list[ReceivedMessage] = []

    def more() -> bool:
        found.extend(transport.receive(queue, 10, 0, visibility_timeout_sec))
        return len(found) >= expected
    eventually(more, 'receiving %d messages' % expected)
    return found


def send(transport: Transport, queue: str, *bodies: str, delay_sec: int = 0) -> list[str]:
    return transport.send_batch(queue, [OutgoingMessage(body, delay_sec=delay_sec)
                                        for body in bodies])


def counts(transport: Transport, queue: str) -> tuple[int, int, int]:
    c = transport.counts(queue)
    return c.visible, c.in_flight, c.delayed


# --- queues -----------------------------------------------------------------

def test_ensure_queue_creates_the_queue_and_its_dead_letter_queue(transport, name):
    transport.ensure_queue(name('q'), 30, name('dlq'), 3)
    assert transport.queue_exists(name('q'))
    assert transport.queue_exists(name('dlq'))


def test_ensure_queue_without_a_dead_letter_queue_creates_only_the_queue(transport, name):
    transport.ensure_queue(name('q'), 30, None, 0)
    assert transport.queue_exists(name('q'))
    assert not transport.queue_exists(name('dlq'))


def test_ensure_queue_again_keeps_the_queue_and_its_messages(transport, name):
    transport.ensure_queue(name('q'), 30, name('dlq'), 3)
    send(transport, name('q'), 'kept')
    transport.ensure_queue(name('q'), 30, name('dlq'), 3)
    assert [m.body for m in receive_all(transport, name('q'), 1)] == ['kept']


def test_a_queue_never_created_does_not_exist(transport, name):
    assert not transport.queue_exists(name('never'))


MISSING_QUEUE_OPERATIONS: dict[str, Callable[[Transport, str], Any]] = {
    'send': lambda t, q: t.send(q, OutgoingMessage('x')),
    'send_batch': lambda t, q: t.send_batch(q, [OutgoingMessage('x')]),
    'receive': lambda t, q: t.receive(q, 1, 0, 30),
    'delete_batch': lambda t, q: t.delete_batch(q, ['handle']),
    'change_visibility_batch': lambda t, q: t.change_visibility_batch(
        q, [VisibilityChange('handle', 0)]),
    'counts': lambda t, q: t.counts(q),
    'purge': lambda t, q: t.purge(q),
}


@pytest.mark.parametrize('operation', sorted(MISSING_QUEUE_OPERATIONS))
def test_every_operation_on_a_missing_queue_raises_queue_not_found(transport, name, operation):
    with pytest.raises(QueueNotFoundError):
        MISSING_QUEUE_OPERATIONS[operation](transport, name('never'))


# --- sending ----------------------------------------------------------------

def test_send_returns_a_message_id_that_the_message_carries(transport, queue):
    message_id = transport.send(queue, OutgoingMessage('one'))
    [received] = receive_all(transport, queue, 1)
    assert received.message_id == message_id


def test_send_batch_returns_one_id_per_message_in_order(transport, queue):
    ids = send(transport, queue, 'a', 'b', 'c')
    received = receive_all(transport, queue, 3)
    assert len(set(ids)) == 3
    assert [{m.message_id: m.body for m in received}[i] for i in ids] == ['a', 'b', 'c']


def test_send_batch_of_more_than_ten_sends_every_message(transport, queue):
    bodies = ['m%d' % i for i in range(12)]
    ids = send(transport, queue, *bodies)
    received = receive_all(transport, queue, 12)
    assert len(received) == 12
    assert [{m.message_id: m.body for m in received}[i] for i in ids] == bodies


def test_body_and_attributes_round_trip_with_non_ascii_text(transport, queue):
    body = 'héllo wörld ✓ 日本語 🎉 <a & "b">\n\ttab'
    attributes = {'kale_task_id': 'tâche-1 ✓', 'kale_retry_num': 3, 'kale_empty_list': '[]'}
    transport.send(queue, OutgoingMessage(body, attributes))
    [received] = receive_all(transport, queue, 1)
    assert received.body == body
    assert received.attributes == {'kale_task_id': 'tâche-1 ✓', 'kale_retry_num': '3',
                                   'kale_empty_list': '[]'}


def test_a_message_without_attributes_is_received_without_attributes(transport, queue):
    transport.send(queue, OutgoingMessage('plain'))
    [received] = receive_all(transport, queue, 1)
    assert received.attributes == {}


def test_a_delayed_message_is_not_received_before_its_delay_and_counts_as_delayed(transport, queue):
    transport.send(queue, OutgoingMessage('later', delay_sec=60))
    assert transport.receive(queue, 10, 0, 30) == []
    assert counts(transport, queue) == (0, 0, 1)


def test_a_delayed_message_is_received_after_its_delay(transport, queue):
    transport.send(queue, OutgoingMessage('soon', delay_sec=1))
    [received] = receive_all(transport, queue, 1)
    assert received.body == 'soon'


# --- receiving ----------------------------------------------------------------

@pytest.mark.parametrize('max_messages', [1, 4, 10])
def test_receive_returns_max_messages_when_more_are_waiting(transport, queue, max_messages):
    send(transport, queue, *['m%d' % i for i in range(12)])
    assert len(transport.receive(queue, max_messages, 0, 30)) == max_messages


@pytest.mark.parametrize('max_messages, wait_sec', [(0, 0), (11, 0), (1, -1), (1, 21)])
def test_receive_refuses_arguments_out_of_range(transport, queue, max_messages, wait_sec):
    with pytest.raises(SQSError) as info:
        transport.receive(queue, max_messages, wait_sec, 30)
    assert info.value.code == 'InvalidParameterValue'


def test_receive_on_an_empty_queue_returns_nothing(transport, queue):
    assert transport.receive(queue, 10, 0, 30) == []


def test_a_long_poll_on_an_empty_queue_returns_nothing_after_its_wait(transport, queue):
    assert transport.receive(queue, 10, 1, 30) == []


def test_a_long_poll_returns_early_when_a_message_arrives(transport, queue):
    events: list[str] = []

    def send_during_the_poll() -> None:
        time.sleep(0.5)     # the poll is waiting by then, unless the machine is very busy
        events.append('sending')
        transport.send(queue, OutgoingMessage('arrived'))

    sender = threading.Thread(target=send_during_the_poll)
    sender.start()
    poll_ended = threading.Timer(LONG_POLL_SEC, events.append, ['poll would have ended'])
    poll_ended.start()
    try:
        received = transport.receive(queue, 10, LONG_POLL_SEC, 30)
        events.append('received')
    finally:
        poll_ended.cancel()
        sender.join()
    assert [m.body for m in received] == ['arrived']
    assert events == ['sending', 'received']


def test_a_received_message_is_hidden_for_its_visibility_timeout(transport, queue):
    send(transport, queue, 'one')
    assert len(transport.receive(queue, 10, 0, 30)) == 1
    assert transport.receive(queue, 10, 0, 30) == []
    assert counts(transport, queue) == (0, 1, 0)


def test_a_received_message_reappears_after_its_visibility_timeout(transport, queue):
    send(transport, queue, 'one')
    [first] = transport.receive(queue, 10, 0, 1)
    [again] = receive_all(transport, queue, 1)
    assert again.message_id == first.message_id


def deliver_three_times(transport: Transport, queue: str) -> list[ReceivedMessage]:
    send(transport, queue, 'one')
    return [receive_all(transport, queue, 1, visibility_timeout_sec=0)[0] for _ in range(3)]


def test_receive_count_increases_on_every_receive(transport, queue):
    deliveries = deliver_three_times(transport, queue)
    assert len({m.message_id for m in deliveries}) == 1
    assert [m.receive_count for m in deliveries] == [1, 2, 3]


def test_each_receive_says_how_long_ago_the_first_receive_was(transport, queue):
    send(transport, queue, 'one')
    [first] = receive_all(transport, queue, 1, visibility_timeout_sec=0)
    time.sleep(1.2)                 # SQS's timestamps are in milliseconds
    [again] = receive_all(transport, queue, 1, visibility_timeout_sec=0)
    assert first.since_first_receive_sec == 0.0
    assert again.since_first_receive_sec is not None
    assert 1.0 <= again.since_first_receive_sec < 1.2 + PATIENCE_SEC


def test_receivers_woken_at_once_never_share_a_message(transport, queue):
    received: list[str] = []
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            received.extend(m.message_id for m in transport.receive(queue, 10, 1, 30))

    threads = [threading.Thread(target=receive) for _ in range(8)]
    for thread in threads:
        thread.start()
    for round_ in range(4):
        time.sleep(0.2)                 # every receiver is waiting in its long poll
        transport.send_batch(queue, [OutgoingMessage('m%d-%d' % (round_, i)) for i in range(10)])
    eventually(lambda: len(received) >= 40, 'receiving 40 messages')
    stop.set()
    for thread in threads:
        thread.join()
    assert len(received) == 40 and len(set(received)) == 40


def test_the_receipt_handle_changes_on_every_receive(transport, queue):
    deliveries = deliver_three_times(transport, queue)
    assert len({m.receipt_handle for m in deliveries}) == 3


# --- settling -----------------------------------------------------------------

def test_delete_batch_deletes_messages(transport, queue):
    send(transport, queue, 'a', 'b', 'c')
    received = receive_all(transport, queue, 3)
    assert transport.delete_batch(queue, [m.receipt_handle for m in received]) == []
    assert counts(transport, queue) == (0, 0, 0)


def test_delete_batch_of_more_than_ten_deletes_every_message(transport, queue):
    send(transport, queue, *['m%d' % i for i in range(12)])
    received = receive_all(transport, queue, 12)
    assert transport.delete_batch(queue, [m.receipt_handle for m in received]) == []
    assert counts(transport, queue) == (0, 0, 0)


def test_delete_batch_reports_an_invalid_handle_and_deletes_the_rest(transport, queue):
    send(transport, queue, 'a', 'b')
    first, second = receive_all(transport, queue, 2)
    handles = [first.receipt_handle, 'not-a-receipt-handle', second.receipt_handle]
    assert transport.delete_batch(queue, handles) == ['not-a-receipt-handle']
    assert counts(transport, queue) == (0, 0, 0)


def test_deleting_a_message_again_succeeds(transport, queue):
    send(transport, queue, 'one')
    [received] = receive_all(transport, queue, 1)
    assert transport.delete_batch(queue, [received.receipt_handle]) == []
    assert transport.delete_batch(queue, [received.receipt_handle]) == []


def test_deleting_with_a_stale_receipt_handle_is_not_reported_as_failed(transport, queue):
    # AWS: "you must provide the most recently received ReceiptHandle for the
    # message (otherwise, the request succeeds, but the message will not be
    # deleted)" (API_DeleteMessage). moto deletes it anyway, so whether the
    # message is gone is not part of the contract; the memory transport keeps
    # it, as AWS says (tests/unit/test_memory_transport.py).
    send(transport, queue, 'one')
    [stale] = receive_all(transport, queue, 1, visibility_timeout_sec=0)
    [latest] = receive_all(transport, queue, 1)
    assert latest.receipt_handle != stale.receipt_handle
    assert transport.delete_batch(queue, [stale.receipt_handle]) == []


def test_change_visibility_to_zero_releases_a_message_at_once(transport, queue):
    send(transport, queue, 'one')
    [first] = transport.receive(queue, 10, 0, 30)
    assert transport.change_visibility_batch(queue, [VisibilityChange(first.receipt_handle, 0)]) == []
    [again] = transport.receive(queue, 10, 0, 30)
    assert (again.message_id, again.receive_count) == (first.message_id, 2)


def test_change_visibility_replaces_the_visibility_timeout(transport, queue):
    send(transport, queue, 'one')
    [first] = transport.receive(queue, 10, 0, 30)
    assert transport.change_visibility_batch(queue, [VisibilityChange(first.receipt_handle, 1)]) == []
    [again] = receive_all(transport, queue, 1)
    assert again.message_id == first.message_id


def test_change_visibility_batch_of_more_than_ten_changes_every_message(transport, queue):
    send(transport, queue, *['m%d' % i for i in range(12)])
    received = receive_all(transport, queue, 12)
    changes = [VisibilityChange(m.receipt_handle, 0) for m in received]
    assert transport.change_visibility_batch(queue, changes) == []
    assert counts(transport, queue) == (12, 0, 0)


def test_change_visibility_reports_invalid_and_deleted_handles(transport, queue):
    send(transport, queue, 'a', 'b')
    kept, deleted = receive_all(transport, queue, 2)
    transport.delete_batch(queue, [deleted.receipt_handle])
    changes = [VisibilityChange(h, 0) for h in
               ('not-a-receipt-handle', deleted.receipt_handle, kept.receipt_handle)]
    assert transport.change_visibility_batch(queue, changes) == [
        'not-a-receipt-handle', deleted.receipt_handle]
    assert counts(transport, queue) == (1, 0, 0)


# --- counts and purge ------------------------------------------------------------

def test_counts_split_visible_in_flight_and_delayed(transport, queue):
    send(transport, queue, 'a', 'b', 'c')
    send(transport, queue, 'd', delay_sec=60)
    transport.receive(queue, 1, 0, 30)
    assert counts(transport, queue) == (2, 1, 1)


def test_purge_deletes_every_message(transport, queue):
    send(transport, queue, 'a', 'b', 'c')
    send(transport, queue, 'later', delay_sec=60)
    transport.receive(queue, 1, 0, 30)
    transport.purge(queue)
    assert counts(transport, queue) == (0, 0, 0)
    assert transport.receive(queue, 10, 0, 30) == []


# --- redrive ----------------------------------------------------------------------

@pytest.fixture
def redriven(transport: Transport, name: Callable[[str], str]) -> Callable[[int], str]:
    """Makes this test's queue with a dead-letter queue and the given max_receive_count."""
    def make(max_receive_count: int) -> str:
        transport.ensure_queue(name('q'), 30, name('dlq'), max_receive_count)
        return name('q')
    return make


@pytest.mark.parametrize('max_receive_count', [1, 2])
def test_a_message_received_more_than_max_receive_count_times_goes_to_the_dead_letter_queue(
        transport, name, redriven, max_receive_count):
    queue = redriven(max_receive_count)
    message_id = transport.send(queue, OutgoingMessage('poison', {'kale_task_id': 't1'}))
    for count in range(1, max_receive_count + 1):
        [received] = receive_all(transport, queue, 1, visibility_timeout_sec=0)
        assert received.receive_count == count
    assert transport.receive(queue, 10, 0, 30) == []     # moved on this receive
    assert counts(transport, queue) == (0, 0, 0)
    [dead] = receive_all(transport, name('dlq'), 1)
    assert (dead.message_id, dead.body, dead.attributes) == (message_id, 'poison',
                                                             {'kale_task_id': 't1'})


# --- FIFO queues -----------------------------------------------------------------


def fifo(body: str, group: str, dedup: Optional[str] = None) -> OutgoingMessage:
    return OutgoingMessage(body, group_id=group, dedup_id=dedup or uuid.uuid4().hex)


@pytest.fixture
def fifo_queue(transport: Transport, name: Callable[[str], str]) -> str:
    queue = name('q.fifo')
    transport.ensure_queue(queue, 30, None, 0)
    return queue


def test_fifo_delivers_a_group_in_send_order_and_nothing_of_it_while_one_is_out(
        transport, fifo_queue):
    transport.send_batch(fifo_queue, [fifo('a1', 'a'), fifo('a2', 'a'), fifo('a3', 'a')])
    [first] = transport.receive(fifo_queue, 1, 0, 30)
    assert (first.body, first.group_id) == ('a1', 'a')
    assert transport.receive(fifo_queue, 10, 0, 30) == [], 'the group is held while a1 is out'
    assert transport.change_visibility_batch(
        fifo_queue, [VisibilityChange(first.receipt_handle, 0)]) == []
    again = eventually(lambda: transport.receive(fifo_queue, 10, 0, 30), 'a1 again')
    assert [m.body for m in again] == ['a1', 'a2', 'a3']
    assert again[0].receive_count == 2
    assert transport.delete_batch(fifo_queue, [m.receipt_handle for m in again]) == []


def test_fifo_holds_a_group_back_while_an_earlier_message_is_held_even_one_made_visible(
        transport, fifo_queue):
    """AWS: once a message of a group is received, no more of the group is
    returned until it is deleted or visible again; a2 made visible by a
    change to 0 waits for a1 too. LocalStack (2026.3) delivers it, and the
    memory transport's localstack_fifo does likewise (kale.worker.consumer
    never releases a message for 0 s behind a held one)."""
    transport.send_batch(fifo_queue, [fifo('a1', 'a'), fifo('a2', 'a')])
    first, second = receive_all(transport, fifo_queue, 2)
    assert transport.change_visibility_batch(fifo_queue, [
        VisibilityChange(first.receipt_handle, 2), VisibilityChange(second.receipt_handle, 0)]) == []
    assert transport.receive(fifo_queue, 10, 0, 30) == [], 'a2 came while a1 was held'
    again = eventually(lambda: transport.receive(fifo_queue, 10, 0, 30), 'a1 again')
    assert [m.body for m in again][:1] == ['a1']


def test_fifo_groups_do_not_wait_for_each_other(transport, fifo_queue):
    transport.send_batch(fifo_queue, [fifo('a1', 'a'), fifo('a2', 'a'), fifo('b1', 'b')])
    [first] = transport.receive(fifo_queue, 1, 0, 30)
    assert first.body == 'a1'
    others = eventually(lambda: transport.receive(fifo_queue, 10, 0, 30), 'group b')
    assert [m.body for m in others] == ['b1']


def test_fifo_drops_a_deduplication_id_seen_recently(transport, fifo_queue):
    transport.send(fifo_queue, fifo('x', 'g', 'same-id'))
    transport.send(fifo_queue, fifo('y', 'g', 'same-id'))    # accepted, never delivered
    got = receive_all(transport, fifo_queue, 1)
    assert [m.body for m in got] == ['x']
    assert transport.receive(fifo_queue, 10, 0, 30) == []


def test_fifo_needs_a_group_id(transport, fifo_queue):
    with pytest.raises(SQSError):
        transport.send(fifo_queue, OutgoingMessage('x', dedup_id='d'))


def test_fifo_redrives_to_a_fifo_dead_letter_queue_in_the_same_group(transport, name):
    queue, dead = name('r.fifo'), name('dlq-r.fifo')
    transport.ensure_queue(queue, 30, dead, 1)
    transport.send(queue, fifo('x', 'g'))
    [received] = receive_all(transport, queue, 1)
    transport.change_visibility_batch(queue, [VisibilityChange(received.receipt_handle, 0)])
    assert transport.receive(queue, 10, 0, 30) == []       # moved on this receive
    [moved] = receive_all(transport, dead, 1)
    assert (moved.body, moved.group_id) == ('x', 'g')


# --- a worker on each transport, under each pool ------------------------------------


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_a_worker_on_each_pool_settles_everything_on_this_transport(transport, name, pool,
                                                                   record):
    """Plain and coroutine tasks, a retry and a dead letter, through the
    broker on this transport: the worker's settles must mean the same on both."""
    from kale import publisher
    from kale.broker import Broker
    from kale.conf import settings
    from kale.queue_config import build_queue_config
    from kale.worker import Worker
    from tests import pool_tasks, tasks
    from tests.support.records import recorded_ids
    broker = Broker(transport, build_queue_config(settings.config), prefix=name(''), config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker))
    try:
        with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
            plain = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(4)])
            coroutine = pool_tasks.AsyncRecordTask.publish_batch(None, [((i,), {})
                                                                        for i in range(4)])
            flaky = tasks.FlakyOnceTask.publish(None)
            tasks.NonRetriableTask.publish(None)
            worker = Worker(queue_names=['default'], burst=True, broker=broker, pool=pool)
            assert worker.run() == 0
    finally:
        publisher.set_publisher(previous)
    assert sorted(recorded_ids(record, 'ran')) == sorted(plain + coroutine + [flaky])
    assert worker.stats == {'succeeded': 9, 'retry': 1, 'dead_letter': 1}
    queue = broker.queues['default']
    assert broker.counts(queue).total == 0
    assert len(transport.receive(broker.dead_letter_name(queue), 10, 0, 30)) == 1
