"""What operators ask of a running worker through the records, on every
pool: a paused queue is not received from (its messages wait in SQS) until
it is resumed, and a stop asked of the worker lets what runs finish and
makes it exit 0. The worker runs in this process's main thread; the
operator's side runs on another."""
from __future__ import annotations

import threading
import time

import pytest

from kale import records
from kale.events import process_identity
from kale.worker import Worker
from kale.worker.consumer import Consumer
from kale.worker.control import QueuePauses
from tests import records_tasks as rt
from tests.support.processes import wait_for

POOLS = ['serial', 'threads', 'asyncio']


@pytest.fixture(autouse=True)
def quick_controls(monkeypatch):
    """The writer's rounds and the control reads, every tenth of a second."""
    from kale.records import recorder, writer
    monkeypatch.setattr(recorder, 'CONTROL_POLL_SEC', 0.1)
    monkeypatch.setattr(writer, 'IDLE_WAKE_SEC', 0.1)


def counting_waits(pauses: QueuePauses) -> list:
    """Count the receives a paused queue answered empty, in the list returned."""
    answered, wait = [], pauses.wait

    def counted(name, seconds):
        answered.append(name)
        wait(name, seconds)
    pauses.wait = counted
    return answered


def run_with_operator(worker, operator) -> int:
    """Run ``worker`` here while ``operator`` runs on a thread; the worker's
    exit code (the operator's failure, if it failed)."""
    failure = []

    def side():
        try:
            operator()
        except BaseException as exc:                # reported in the test, not lost
            failure.append(exc)
            worker.stop()
    thread = threading.Thread(target=side)
    thread.start()
    code = worker.run()
    thread.join(30)
    if failure:
        raise failure[0]
    return code


@pytest.mark.parametrize('pool', POOLS)
def test_a_paused_queue_waits_in_sqs_until_it_is_resumed_and_a_stop_ends_the_worker(
        pool, memory_broker, records_url):
    controls = records.store().controls
    controls.pause('default', time.time())
    worker = Worker(pool=pool, broker=memory_broker, queue_names=['default'])
    answered = counting_waits(worker.consumer.pauses)
    rt.PlainTask.ran = []
    queue = memory_broker.queues.get_queue('default')

    def operator():
        wait_for(lambda: 'default' in worker.consumer.pauses, 30, 'the worker to read the pause')
        rt.PlainTask.publish_batch(None, [((n,), {}) for n in range(5)])
        seen = len(answered)
        wait_for(lambda: len(answered) >= seen + 3, 10, 'three receives answered empty')
        assert rt.PlainTask.ran == []
        assert memory_broker.counts(queue).visible == 5          # waiting in SQS
        controls.resume('default')
        wait_for(lambda: len(rt.PlainTask.ran) == 5, 10, 'the tasks to run once resumed')
        controls.ask_stop(process_identity()[0], time.time())
    assert run_with_operator(worker, operator) == 0
    assert sorted(rt.PlainTask.ran) == list(range(5))
    assert controls.stops() == {}, 'a worker that stopped clears its stop'


@pytest.mark.parametrize('pool', POOLS)
def test_a_stop_lets_the_running_task_finish_and_gives_back_the_rest(pool, memory_broker,
                                                                   records_url):
    controls = records.store().controls
    worker = Worker(pool=pool, broker=memory_broker, queue_names=['default'], max_in_flight=1)
    nap = rt.NapTask.publish(None, 1.0)
    queue = memory_broker.queues.get_queue('default')

    def operator():
        wait_for(lambda: records.get(nap).status == 'running', 10, 'the nap to start')
        rt.PlainTask.publish_batch(None, [((n,), {}) for n in range(3)])
        controls.ask_stop(process_identity()[0], time.time())
    rt.PlainTask.ran = []
    assert run_with_operator(worker, operator) == 0
    assert records.get(nap).status == 'succeeded'
    assert memory_broker.counts(queue).visible + len(rt.PlainTask.ran) == 3


def test_a_receive_out_when_its_queue_is_paused_gives_back_what_it_brings(memory_broker):
    consumer = Consumer(memory_broker)
    queue = memory_broker.queues.get_queue('default')
    rt.PlainTask.publish_batch(None, [((n,), {}) for n in range(3)])
    receive = memory_broker.receive

    def paused_meanwhile(*args, **kwargs):
        got = receive(*args, **kwargs)
        consumer.pauses.set(['default'])
        return got
    memory_broker.receive = paused_meanwhile
    assert consumer.receive(queue, wait_sec=0).messages == []
    memory_broker.receive = receive
    assert memory_broker.counts(queue).visible == 3
    consumer.pauses.set([])
    assert len(consumer.receive(queue, wait_sec=0, max_messages=10).messages) == 3


@pytest.mark.real_time('a resume ends a long poll of 20 s that a paused queue answers')
def test_a_paused_queue_asks_sqs_nothing_and_a_resume_ends_its_wait(memory_broker):
    consumer = Consumer(memory_broker)
    queue = memory_broker.queues.get_queue('default')
    consumer.pauses.set(['default'])
    asked = memory_broker.transport.requests.copy()
    threading.Timer(0.2, lambda: consumer.pauses.set([])).start()
    started = time.monotonic()
    assert consumer.receive(queue, wait_sec=20).messages == []
    assert time.monotonic() - started < 10              # the resume, not the 20 s
    assert memory_broker.transport.requests == asked
