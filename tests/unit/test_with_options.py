"""MyTask.with_options(queue=...): the task's publishing methods and .s(),
sent to another configured queue and run by the workers that serve it."""
import asyncio
import concurrent.futures

import pytest

from kale import testing
from kale import worker as kale_worker
from kale.codec import decode
from kale.exceptions import PublishError, UnknownQueueError
from tests import tasks
from tests.support.records import recorded_ids


def received(broker, queue):
    name = broker.declare(broker.queues[queue])
    return [decode(m.body, name) for m in broker.transport.receive(name, 10, 0, 30)]


def test_publish_goes_to_the_queue_named_and_a_worker_of_that_queue_runs_it(memory_broker,
                                                                           record):
    moved = tasks.RecordTask.with_options(queue='low').publish(None, 'moved')
    batch = tasks.RecordTask.with_options(queue='low').publish_batch(None, [(('b',), {})])
    usual = tasks.RecordTask.publish(None, 'usual')
    assert kale_worker.Worker(queue_names=['low'], burst=True, broker=memory_broker).run() == 0
    assert sorted(recorded_ids(record, 'ran')) == sorted([moved, *batch])
    assert [m.task_id for m in received(memory_broker, 'default')] == [usual]


def test_apublish_goes_to_the_queue_named(memory_broker):
    async def main():
        options = tasks.RecordTask.with_options(queue='high')
        return [await options.apublish(None, 1), *await options.apublish_batch(None, [((2,), {})])]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:        # a loop of its own
        ids = pool.submit(asyncio.run, main()).result(30)
    assert sorted(m.task_id for m in received(memory_broker, 'high')) == sorted(ids)


def test_a_queue_not_in_the_queue_config_is_refused_as_at_publish(memory_broker):
    with pytest.raises(UnknownQueueError, match=r"nowhere"):
        tasks.RecordTask.with_options(queue='nowhere').publish(None, 1)
    with pytest.raises(PublishError, match=r'^task tests\.tasks\.RecordTask: with_options\(queue='
                                           r'\.\.\.\) takes a queue name, got 5$'):
        tasks.RecordTask.with_options(queue=5)


def test_a_node_made_with_options_runs_on_that_queue():
    node = tasks.AddTask.with_options(queue='low').s(1, 2)
    assert (node.queue, node.args, node.task_class) == ('low', (1, 2), tasks.AddTask)
    assert tasks.AddTask.s(1, 2).queue is None


def test_eager_mode_runs_a_task_published_with_options():
    with testing.eager() as runs:
        tasks.AddTask.with_options(queue='low').publish(None, 2, 3)
    assert [run.result for run in runs] == [5]
