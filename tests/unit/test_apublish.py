"""Publishing from asyncio code: apublish and apublish_batch check the call as
publish does, return task ids, and leave the caller's event loop free."""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools

import pytest

from kale import publisher
from kale.broker import Broker
from kale.codec import decode
from kale.conf import settings
from kale.exceptions import PublishError
from kale.queue_config import build_queue_config
from kale.transport.memory import MemoryTransport
from tests import pool_tasks, tasks


@pytest.fixture
def slow_broker():
    """A broker whose every request takes a second."""
    broker = Broker(MemoryTransport(latency_sec=1.0), build_queue_config(settings.config),
                    config=settings.config)
    previous = publisher.set_publisher(publisher.Publisher(broker))
    yield broker
    publisher.set_publisher(previous)


def run(coroutine):
    """``asyncio.run`` on a thread of its own, as in an application: the
    test process may have a loop of its own running (the dashboard tests'
    browser driver keeps one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result(30)


def queued(broker, queue='default'):
    name = broker.declare(broker.queues[queue])
    return [decode(m.body, name) for m in broker.transport.receive(name, 10, 0, 30)]


def test_apublish_returns_the_task_id_of_the_message_it_sent(memory_broker):
    async def main():
        return await tasks.AddTask.apublish(None, 1, 2)
    task_id = run(main())
    [message] = queued(memory_broker)
    assert (message.task_id, message.args) == (task_id, (1, 2))


def test_apublish_batch_returns_the_ids_in_order(memory_broker):
    async def main():
        return await pool_tasks.AsyncRecordTask.apublish_batch(
            None, [((i,), {}) for i in range(3)])
    ids = run(main())
    assert sorted(ids) == sorted(m.task_id for m in queued(memory_broker)) and len(ids) == 3


def test_apublish_refuses_a_bad_call_as_publish_does(memory_broker):
    async def main():
        await tasks.AddTask.apublish(None, 1, 2, 3)
    with pytest.raises(PublishError, match=r'^task tests\.tasks\.AddTask: arguments do not '
                                           r'match run_task\(a, b, \*\*kwargs\): too many'):
        run(main())
    assert queued(memory_broker) == []


def test_the_event_loop_goes_on_while_apublish_waits_for_sqs(slow_broker):
    """Five publishes of a second each (one request each): meanwhile a
    ticker on the same loop keeps ticking. Were a publish to block the loop,
    a gap would last a second or more; a loaded machine's own pauses (0.15 s
    seen in CI) stay well under that."""
    async def main():
        ticks = []

        async def ticker():
            while True:
                ticks.append(asyncio.get_running_loop().time())
                await asyncio.sleep(0.02)
        ticking = asyncio.ensure_future(ticker())
        ids = await asyncio.gather(*(tasks.AddTask.apublish(None, i, i) for i in range(5)))
        ticking.cancel()
        return ids, ticks
    ids, ticks = run(main())
    assert len(set(ids)) == 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert len(ticks) >= 5 and max(gaps) < 0.5, 'the loop was blocked while publishing'
