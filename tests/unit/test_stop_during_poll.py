"""A stop that comes while a long poll is out: the worker waits for the poll's
answer (a long poll cannot be called back) and gives back what it brings
before it exits, on every pool; it does not leave it invisible for a whole
visibility timeout (in-process, memory transport)."""
from __future__ import annotations

import threading
import time

import pytest

from kale.worker import EXIT_OK, Worker
from tests import tasks

#: Bound on the waits of the test's own threads.
WAIT_SEC = 30
#: How long a held answer takes to come back once the worker closes.
ANSWER_SEC = 0.5


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_a_stop_during_a_long_poll_waits_for_its_answer_and_gives_back_what_it_brings(
        memory_broker, monkeypatch, pool):
    """The 20-second poll of queue slowpoll takes a task published while it
    is out, and the stop comes before its answer is back: the answer is held
    until the worker begins closing its receives, and comes ANSWER_SEC
    later. A worker that does not wait for it exits with the message taken
    and unsettled."""
    transport = memory_broker.transport
    real_receive = transport.receive
    polling, taken, closing = threading.Event(), threading.Event(), threading.Event()

    def receive(queue, max_messages, wait_sec, *args, **kwargs):
        answer = real_receive(queue, max_messages, wait_sec, *args, **kwargs)
        if wait_sec and answer:
            taken.set()
            closing.wait(WAIT_SEC)          # the answer is on its way back
            time.sleep(ANSWER_SEC)
        return answer

    def poll(queue, max_messages, wait_sec, *args, **kwargs):
        if wait_sec:
            polling.set()
        return receive(queue, max_messages, wait_sec, *args, **kwargs)

    monkeypatch.setattr(transport, 'receive', poll)
    worker = Worker(queue_names=['slowpoll'], broker=memory_broker, pool=pool)
    receives = worker.intake
    real_close = receives.close

    def close():
        closing.set()
        real_close()

    monkeypatch.setattr(receives, 'close', close)

    def publish_then_stop():
        polling.wait(WAIT_SEC)
        tasks.RecordTask.with_options(queue='slowpoll').publish(None, 'late')
        taken.wait(WAIT_SEC)
        worker.stop()

    helper = threading.Thread(target=publish_then_stop)
    helper.start()
    try:
        assert worker.run() == EXIT_OK
        counts = memory_broker.counts(memory_broker.queues['slowpoll'])
        assert (counts.visible, counts.in_flight) == (1, 0)
    finally:
        closing.set()
        helper.join(WAIT_SEC)


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_a_burst_worker_polls_briefly_and_exits_without_waiting_out_a_long_poll(
        memory_broker, monkeypatch, pool):
    """Queue slowpoll long-polls 20 s. A burst worker only asks whether the
    queues are empty: its idle polls wait at most BURST_POLL_SEC, so waiting
    for the answer of the one still out when it is done does not hold its
    exit for 20 s."""
    transport = memory_broker.transport
    real_receive, waits = transport.receive, []

    def receive(queue, max_messages, wait_sec, *args, **kwargs):
        waits.append(wait_sec)
        return real_receive(queue, max_messages, wait_sec, *args, **kwargs)

    monkeypatch.setattr(transport, 'receive', receive)
    tasks.RecordTask.with_options(queue='slowpoll').publish(None, 'one')
    worker = Worker(queue_names=['slowpoll'], broker=memory_broker, pool=pool, burst=True)
    assert worker.run() == EXIT_OK
    assert max(waits) <= 1          # (the serial pool found the queue drained before any poll)
