"""Settling inline when the endpoint is fast, on a thread when it is slow, and
resuming a batch an outage interrupted without sending a copy twice."""
import threading
import time

import pytest

from kale.conf import settings
from kale.events import Outcome, Settlement
from kale.exceptions import EndpointUnreachableError
from kale.queue_config import build_queue_config
from kale.transport import OutgoingMessage
from kale.worker.batch import Batch
from kale.worker.consumer import Consumer, SettleDeferred
from kale.worker.settler import Settler
from tests import tasks
from tests.support.clock import NoSleepClock


def received(broker, count):
    queue = build_queue_config(settings.config)['default']
    tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(count)])
    return Batch(queue, broker.receive(queue), time.monotonic(), broker.sqs_name(queue))


def succeeded(batch):
    batch.settlements = [Settlement(m, Outcome.SUCCEEDED) for m in batch.messages]
    return batch


def deleting_threads(broker):
    """The threads that settle: each delete records the thread it ran on."""
    threads = []
    real = broker.delete

    def delete(*args):
        threads.append(threading.get_ident())
        return real(*args)

    broker.delete = delete
    return threads


def test_a_fast_endpoint_is_settled_in_the_callers_thread(memory_broker):
    # (the memory transport answers in microseconds; a loaded machine's
    # pauses took one settle past the default 5 ms bound)
    settler = Settler(Consumer(memory_broker), inline_below_sec=1.0)
    threads = deleting_threads(memory_broker)
    for _ in range(3):
        settler.submit(succeeded(received(memory_broker, 3)))
    assert threads == [threading.get_ident()] * 3
    assert [len(b.settlements) for b in settler.completed()] == [3, 3, 3]
    settler.close()


def test_a_slow_endpoint_is_settled_on_the_thread(memory_broker):
    memory_broker.transport.latency_sec = 0.005           # over INLINE_BELOW_SEC
    settler = Settler(Consumer(memory_broker))
    threads = deleting_threads(memory_broker)
    for _ in range(4):
        settler.submit(succeeded(received(memory_broker, 1)))
        settler.flush()
    assert settler.recent_sec >= 0.005
    assert threads[0] == threading.get_ident()            # the first, before it knew
    assert set(threads[1:]) <= {thread.ident for thread in settler._threads}
    settler.close()


def delete_fails_once(broker):
    """The broker's next delete meets an outage; later ones work."""
    real_delete, outages = broker.delete, [EndpointUnreachableError('down')]

    def delete(*args):
        if outages:
            raise outages.pop()
        return real_delete(*args)

    broker.delete = delete


def test_an_outage_hands_the_batch_to_the_thread_which_resumes_it(memory_broker):
    batch = received(memory_broker, 2)
    first, second = batch.messages
    copy = OutgoingMessage(first.body + '-retry', {}, 0)
    batch.settlements = [Settlement(first, Outcome.RETRY, copy=copy),
                         Settlement(second, Outcome.SUCCEEDED)]
    delete_fails_once(memory_broker)
    consumer = Consumer(memory_broker, clock=NoSleepClock())
    with pytest.raises(SettleDeferred):
        consumer.settle(batch, retry=False)
    assert batch.settlements[0].copied and not any(s.settled for s in batch.settlements)
    consumer.settle(batch)                                   # resumes: deletes only
    assert all(s.settled for s in batch.settlements)
    queue = batch.queue
    assert [m.body for m in memory_broker.receive(queue)] == [first.body + '-retry']


def test_a_settler_resumes_an_interrupted_batch_in_the_background(memory_broker):
    batch = succeeded(received(memory_broker, 2))
    delete_fails_once(memory_broker)
    settler = Settler(Consumer(memory_broker, clock=NoSleepClock()))
    settler.submit(batch)
    settler.flush()
    [done] = settler.completed()
    assert all(s.settled for s in done.settlements)
    settler.close()


def test_a_full_settler_says_as_soon_as_it_has_room_again(memory_broker):
    """A worker receives nothing while its settler is full; the settler says
    when a settled batch leaves it room, so the worker's next receive goes
    out then, not after its loop's next tick."""
    freed, go_on = threading.Event(), threading.Event()
    real = memory_broker.delete
    memory_broker.delete = lambda *args: (go_on.wait(30), real(*args))[1]
    settler = Settler(Consumer(memory_broker), max_pending=2, inline_below_sec=0.0,
                      threads=2, on_free=freed.set)
    settler.submit(succeeded(received(memory_broker, 2)))
    settler.submit(succeeded(received(memory_broker, 2)))
    assert settler.full() and not freed.is_set()
    go_on.set()
    assert freed.wait(30) and not settler.full()
    settler.close()
