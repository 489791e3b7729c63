"""The pools: tasks side by side on threads or on an event loop, held to their
limits, capped per task, stopped cleanly; coroutine tasks and hooks on every
pool (in-process, memory transport). The worker behaviours every pool shares
run on each pool in test_worker.py, test_fifo.py, test_suspects.py,
test_heartbeat.py, test_worker_payloads.py and test_records.py."""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import pytest

from kale.conf import settings
from kale.hooks import WorkerHooks
from kale.worker import EXIT_OK, EXIT_STUCK, Worker
from tests import pool_tasks, tasks
from tests.support.records import most_at_once, read_records, recorded_ids

POOLS = ['serial', 'threads', 'asyncio']


def run(broker, pool, queues=('default',), **kwargs):
    worker = Worker(queue_names=list(queues), burst=True, broker=broker, pool=pool, **kwargs)
    return worker, worker.run()


@pytest.mark.parametrize('pool', POOLS)
def test_every_kind_of_task_runs_on_every_pool(memory_broker, record, pool):
    plain = tasks.RecordTask.publish(None, 'p')
    coroutine = pool_tasks.AsyncRecordTask.publish(None, 'c')
    hooked = pool_tasks.AsyncHooksTask.publish(None)
    declined = pool_tasks.AsyncHooksTask.publish(None, go=False)
    worker, code = run(memory_broker, pool)
    assert code == EXIT_OK
    assert worker.inline == (pool == "serial")
    assert sorted(recorded_ids(record, 'ran')) == sorted([plain, coroutine, hooked])
    assert recorded_ids(record, 'before') == [hooked]
    assert [r[4] for r in read_records(record) if r[0] == 'after'] == ['done']
    assert worker.stats == {'succeeded': 3, 'skipped': 1}
    assert declined not in recorded_ids(record, 'before')


@pytest.mark.parametrize('pool, task_class', [('threads', pool_tasks.SpanTask),
                                              ('asyncio', pool_tasks.AsyncSpanTask),
                                              ('asyncio', pool_tasks.SpanTask),
                                              ('threads', pool_tasks.AsyncSpanTask)])
def test_tasks_run_side_by_side_up_to_the_in_flight_limit(memory_broker, record, pool,
                                                           task_class):
    task_class.publish_batch(None, [((0.3,), {}) for _ in range(12)])
    worker, code = run(memory_broker, pool, max_in_flight=4)
    assert code == EXIT_OK and worker.stats['succeeded'] == 12
    assert most_at_once(record) == 4


def test_the_serial_pool_runs_one_task_at_a_time(memory_broker, record):
    pool_tasks.SpanTask.publish_batch(None, [((0.05,), {}) for _ in range(4)])
    _, code = run(memory_broker, 'serial')
    assert code == EXIT_OK and most_at_once(record) == 1


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_max_concurrency_caps_a_tasks_runs_in_the_process(memory_broker, record, pool):
    pool_tasks.CappedSpanTask.publish_batch(None, [((0.2,), {}) for _ in range(6)])
    tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(4)])
    worker, code = run(memory_broker, pool, max_in_flight=8)
    assert code == EXIT_OK and worker.stats['succeeded'] == 10
    assert most_at_once(record) == 2


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_tasks_of_a_second_or_more_get_no_message_held_ready(memory_broker, record, pool):
    """Tasks of 1.5 s that start together on a queue of 4 s, limited to 2 s: a
    message held ready beside them would wait a whole run and then no longer
    fit what is left of its visibility timeout (released, sent again)."""
    pool_tasks.ShortSpanTask.publish_batch(None, [((1.5,), {}) for _ in range(6)])
    worker, code = run(memory_broker, pool, queues=('short',), max_in_flight=2)
    assert code == EXIT_OK and worker.stats == {'succeeded': 6}


@pytest.mark.real_time('the run must be cut well before its coroutine would end by itself')
@pytest.mark.parametrize('pool', POOLS)
def test_a_coroutine_past_its_time_limit_is_cancelled_and_fails_as_a_time_limit(
        memory_broker, record, pool):
    task_id = pool_tasks.AsyncOverLimitTask.publish(None)
    started = time.monotonic()
    worker, code = run(memory_broker, pool)
    assert code == EXIT_OK and worker.stats == {'dead_letter': 1}
    assert time.monotonic() - started < 10, 'the run was not cut at its limit'
    assert [r[1:2] + r[4:] for r in read_records(record)] == [
        [task_id, 'TimeLimitExceeded']]
    queue = memory_broker.queues['default']
    [dead] = memory_broker.transport.receive(memory_broker.dead_letter_name(queue), 10, 0, 30)
    assert dead.attributes['kale_dead_letter_reason'].startswith('no_retries: TimeLimitExceeded')


@pytest.mark.parametrize('pool', POOLS)
def test_python_code_past_its_time_limit_is_stopped_on_every_pool(memory_broker, record, pool):
    task_id = pool_tasks.BusyOverLimitTask.publish(None)
    worker, code = run(memory_broker, pool)
    assert code == EXIT_OK and worker.stats == {'dead_letter': 1}
    assert [r[1:2] + r[4:] for r in read_records(record)] == [
        [task_id, 'TimeLimitExceeded']]


@pytest.mark.parametrize('pool, stuck_class', [('threads', pool_tasks.StuckTask),
                                               ('asyncio', pool_tasks.StuckTask),
                                               ('asyncio', pool_tasks.LoopBlockingTask)])
def test_a_task_that_does_not_come_back_from_its_limit_stops_the_worker(
        memory_broker, record, pool, stuck_class, caplog):
    """A thread blocked in a C call, or a coroutine blocking the loop, past
    the grace period: what ended is settled, the stuck message is left to SQS,
    and the worker exits with EXIT_STUCK for a fresh process."""
    stuck_class.time_limit = 0.2
    try:
        stuck = stuck_class.publish(None, 3)
        with settings.override(WORKER_STUCK_GRACE_SEC=0.5), \
                caplog.at_level(logging.ERROR, logger='kale.worker'):
            _, code = run(memory_broker, pool, max_in_flight=1)
    finally:
        stuck_class.time_limit = 5 if stuck_class is pool_tasks.LoopBlockingTask else 0.2
    assert code == EXIT_STUCK
    assert any('task %s' % stuck in r.getMessage() and 'still running' in r.getMessage()
               for r in caplog.records)
    counts = memory_broker.counts(memory_broker.queues['default'])
    assert (counts.visible, counts.in_flight) == (0, 1), 'the stuck message is left to SQS'
    time.sleep(3)                               # the stuck call ends before the next test


def test_a_coroutine_that_blocks_the_event_loop_is_logged_by_name(memory_broker, record, caplog):
    task_id = pool_tasks.LoopBlockingTask.publish(None, 1.0)
    with caplog.at_level(logging.WARNING, logger='kale.worker'):
        worker, code = run(memory_broker, 'asyncio')
    assert code == EXIT_OK and worker.stats == {'succeeded': 1}
    assert any('event loop has been blocked' in r.getMessage() and task_id in r.getMessage()
               for r in caplog.records)


class AsyncHooks(WorkerHooks):
    def __init__(self):
        self.calls = []

    async def on_task_started(self, queue, received, message):
        await asyncio.sleep(0)
        self.calls.append(('started', message.task_id))

    async def on_task_succeeded(self, settlement):
        await asyncio.sleep(0)
        self.calls.append(('succeeded', settlement.task_id))


@pytest.mark.parametrize('pool', POOLS)
def test_coroutine_worker_hooks_are_awaited(memory_broker, record, pool):
    plain = tasks.RecordTask.publish(None, 1)
    coroutine = pool_tasks.AsyncRecordTask.publish(None, 2)
    hooks = AsyncHooks()
    _, code = run(memory_broker, pool, hooks=[hooks])
    assert code == EXIT_OK
    assert sorted(hooks.calls) == sorted([('started', plain), ('started', coroutine),
                                          ('succeeded', plain), ('succeeded', coroutine)])


class StopAtFirstStart(WorkerHooks):
    def __init__(self):
        self.worker = None

    def on_worker_startup(self, worker):
        self.worker = worker

    def on_task_started(self, queue, received, message):
        self.worker.stop()


@pytest.mark.parametrize('pool, task_class', [('threads', pool_tasks.SpanTask),
                                              ('asyncio', pool_tasks.AsyncSpanTask)])
def test_a_stop_lets_running_tasks_end_and_releases_the_rest(memory_broker, record, pool,
                                                             task_class):
    task_class.publish_batch(None, [((0.5,), {}) for _ in range(8)])
    worker = Worker(queue_names=['default'], broker=memory_broker, pool=pool, max_in_flight=2,
                    hooks=[StopAtFirstStart()])
    assert worker.run() == EXIT_OK
    started, ended = recorded_ids(record, 'start'), recorded_ids(record, 'end')
    assert sorted(started) == sorted(ended) and 1 <= len(started) <= 2
    assert worker.stats['succeeded'] == len(started)
    counts = memory_broker.counts(memory_broker.queues['default'])
    assert counts.visible == 8 - len(started) and counts.in_flight == 0


class SignalsTwiceOnceStarted(WorkerHooks):
    """A stop signal, then a second 0.6 s later, once the task has started
    (a timer from the start of the run could come before it on a loaded
    machine, and stop a worker with nothing running)."""

    def __init__(self):
        self.worker = None

    def on_worker_startup(self, worker):
        self.worker = worker

    def on_task_started(self, queue, received, message):
        handle = self.worker.signals.handle
        threading.Thread(target=lambda: (handle(15, None), time.sleep(0.6), handle(15, None)),
                         daemon=True).start()


@pytest.mark.real_time('the stopped task would otherwise run for 20 s')
@pytest.mark.parametrize('pool, task_class', [('threads', pool_tasks.BusyOverLimitTask),
                                              ('asyncio', pool_tasks.AsyncOverLimitTask)])
def test_a_second_signal_stops_running_tasks_which_are_released(memory_broker, record, pool,
                                                               task_class):
    task_class.time_limit = 20
    try:
        task_class.publish(None)
        worker = Worker(queue_names=['default'], broker=memory_broker, pool=pool,
                        hooks=[SignalsTwiceOnceStarted()])
        started = time.monotonic()
        assert worker.run() == EXIT_OK
    finally:
        task_class.time_limit = 0.3
    assert time.monotonic() - started < 10          # the second signal, not the 20 s limit
    assert worker.stats == {'release': 1}
    assert memory_broker.counts(memory_broker.queues['default']).visible == 1


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_the_in_flight_limit_defaults_by_pool_and_follows_the_setting(memory_broker, pool):
    assert Worker(broker=memory_broker, pool=pool).max_in_flight == {'threads': 16,
                                                                     'asyncio': 100}[pool]
    with settings.override(WORKER_MAX_IN_FLIGHT=7):
        assert Worker(broker=memory_broker, pool=pool).max_in_flight == 7
        assert Worker(broker=memory_broker, pool=pool, max_in_flight=3).max_in_flight == 3


class TurnSelector:
    """A selector that picks the queues in turn, counting selections over
    every thread's selector."""

    made = 0
    selections = 0

    def __init__(self, queue_info):
        self.queue_info = queue_info
        TurnSelector.made += 1

    def select(self):
        TurnSelector.selections += 1
        queues = self.queue_info.get_queues()
        return queues[TurnSelector.selections % len(queues)]


def test_the_intake_shares_room_out_by_selections_not_to_the_first_busy_queue():
    """Room for 40: four receives at once, each a selection on a thread of
    its own, so the queues share the room by the selector's choices."""
    import queue as queue_module

    from kale.broker import Broker
    from kale.queue_config import build_queue_config
    from kale.transport.memory import MemoryTransport
    from kale.worker.consumer import Consumer
    from kale.worker.intake import Intake
    broker = Broker(MemoryTransport(latency_sec=0.1), build_queue_config(settings.config),
                    config=settings.config)
    queues = [broker.queues[name] for name in ('high', 'default')]
    for queue in queues:
        broker.send(queue, [tasks_outgoing(broker, queue, i) for i in range(30)])
    arrivals = queue_module.SimpleQueue()
    TurnSelector.made = TurnSelector.selections = 0
    intake = Intake(Consumer(broker), queues, TurnSelector, arrivals.put, max_receives=4)
    intake.refill(40)
    assert intake.asked == 40
    got = [intake.arrived(arrivals.get(timeout=10)) for _ in range(4)]
    intake.close()
    assert TurnSelector.made == TurnSelector.selections == 4
    assert sorted(batch.queue.name for batch in got) == ['default', 'default', 'high', 'high']
    assert sum(len(batch.messages) for batch in got) == 40 and intake.asked == 0


def test_an_idle_queue_is_polled_again_after_its_pause_of_waiting_on_a_still_clock(
        memory_broker):
    """On a FakeClock the pools' intake still polls an idle queue again: after
    MIN_POLL_INTERVAL_SEC of the worker's waits in vain, as on the machine's
    clock after that long."""
    from kale.worker.consumer import Consumer
    from kale.worker.intake import MIN_POLL_INTERVAL_SEC, Arrival, Intake
    from tests.support.clock import FakeClock
    queue = memory_broker.queues['default']
    intake = Intake(Consumer(memory_broker), [queue], TurnSelector, lambda arrival: None,
                    max_receives=1, clock=FakeClock())
    intake.idle = True
    polls = []
    intake._poll_once = lambda queue_, wait, ask, started: polls.append(queue_.name)
    intake._polling.clear()
    intake.arrived(Arrival(1, None, polled=queue, polled_at=intake.clock.monotonic()))
    intake.refill(10)
    assert polls == []                                   # it answered empty just now
    intake.waited(MIN_POLL_INTERVAL_SEC / 2)
    intake.refill(10)
    assert polls == []
    intake.waited(MIN_POLL_INTERVAL_SEC / 2)
    intake.refill(10)                                    # the poll starts on a thread of its own
    deadline = time.monotonic() + 10
    while not polls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert polls == ['default']
    intake.close()


def tasks_outgoing(broker, queue, i):
    from kale import codec
    from kale.message import Message
    return codec.to_outgoing(Message('t%s%d' % (queue.name, i), tasks.RecordTask.task_path(),
                                     (i,)), broker.sqs_name(queue))


@pytest.mark.parametrize('pool', ['serial', 'threads', 'asyncio'])
def test_a_stop_during_an_outage_stops_a_pool_at_once(memory_broker, monkeypatch, pool):
    from kale.exceptions import EndpointUnreachableError

    def unreachable(*args):
        raise EndpointUnreachableError('connection refused')
    monkeypatch.setattr(memory_broker.transport, 'receive', unreachable)
    worker = Worker(queue_names=['default'], broker=memory_broker, pool=pool)
    threading.Timer(1.0, lambda: worker.signals.handle(15, None)).start()
    assert worker.run() == EXIT_OK
    assert worker.stats == {}


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_records_follow_runs_side_by_side_and_a_retry_is_scheduled(memory_broker, records_url,
                                                                    record, pool, monkeypatch):
    """While three tasks run at once each record says running; a failure that
    will retry says scheduled, with its error."""
    from kale import records
    from tests import records_tasks as rt
    monkeypatch.setattr(rt.BrokenTask, 'max_retries', 1)
    held = pool_tasks.AsyncHeldTask
    held.released.clear()
    spans = held.publish_batch(None, [((), {}) for _ in range(3)])
    broken = rt.BrokenTask.publish(None)
    worker = Worker(queue_names=['default'], broker=memory_broker, pool=pool, max_in_flight=4)
    seen = {}

    def watch():
        deadline = time.monotonic() + 14         # (the held tasks end by themselves at 15 s)
        try:
            while time.monotonic() < deadline and 'running' not in seen:
                found = [records.get(t) for t in spans]
                if all(r is not None and r.status == 'running' for r in found):
                    seen['running'] = True
                time.sleep(0.05)
            held.released.set()
            while time.monotonic() < deadline and records.get(broken).status != 'scheduled':
                time.sleep(0.05)
        finally:
            held.released.set()
            worker.stop()
    watcher = threading.Thread(target=watch)
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=30, RETRY_DELAY_JITTER=0):
        watcher.start()
        assert worker.run() == EXIT_OK
    watcher.join(10)
    assert seen == {'running': True}
    failed = records.get(broken)
    assert failed.status == 'scheduled' and failed.error_type == 'ValueError'
    assert [records.get(t).status for t in spans] == ['succeeded'] * 3


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_process_isolation_runs_each_task_in_a_child_on_a_pool(memory_broker, record, pool):
    plain = tasks.RecordTask.publish_batch(None, [((i,), {}) for i in range(3)])
    coroutine = pool_tasks.AsyncRecordTask.publish(None, 'c')
    with settings.override(TASK_ISOLATION='process'):
        worker, code = run(memory_broker, pool)
    assert code == EXIT_OK and worker.stats == {'succeeded': 4}
    ran = [r for r in read_records(record) if r[0] == 'ran']
    assert sorted(r[1] for r in ran) == sorted(plain + [coroutine])
    assert str(os.getpid()) not in {r[2] for r in ran}, 'a task ran in the worker itself'


class DeclaredAtStart(WorkerHooks):
    def __init__(self):
        self.declared = None

    def on_worker_startup(self, worker):
        self.declared = set(worker.broker._declared)


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
def test_a_pool_has_its_queues_and_its_first_receives_out_before_it_first_waits(
        memory_broker, record, pool, monkeypatch):
    """Its queues are declared together before it serves (one round trip,
    not one each on the way to its first receives), and its first receives
    are out before its first wait for events (that wait was a whole tick,
    0.1 s, with nothing asked for)."""
    tasks.RecordTask.publish(None, 'p')
    receiving_at_first_wait = []
    take_events = Worker.take_events

    def first_wait(self, wait_sec):
        if not receiving_at_first_wait:
            receiving_at_first_wait.append(self.intake.receiving)
        return take_events(self, wait_sec)
    monkeypatch.setattr(Worker, 'take_events', first_wait)
    hook = DeclaredAtStart()
    worker, code = run(memory_broker, pool, queues=('default', 'high'), hooks=[hook])
    assert code == EXIT_OK and worker.stats == {'succeeded': 1}
    assert receiving_at_first_wait == [True]
    assert hook.declared == {memory_broker.sqs_name(memory_broker.queues[name])
                             for name in ('default', 'high')}


def test_what_a_receive_brings_while_a_pool_holds_all_its_suspect_allows_goes_back_at_once(
        memory_broker):
    """A pool at its suspect's cap: what a receive still out brings is given
    back by the receiving thread (the worker hears of an empty answer),
    rather than held unseen beside a suspect that may kill the worker."""
    from kale.transport import OutgoingMessage
    from kale.worker.consumer import Consumer
    from kale.worker.intake import Intake
    queue = memory_broker.queues['default']
    arrivals = []
    intake = Intake(Consumer(memory_broker), [queue], TurnSelector, arrivals.append,
                    max_receives=1)
    intake.full = True
    memory_broker.send(queue, [OutgoingMessage('arrived')])
    intake.refill(10)
    deadline = time.monotonic() + 10
    while not arrivals and time.monotonic() < deadline:
        time.sleep(0.01)
    [arrival] = arrivals
    assert arrival.batch is not None and arrival.batch.messages == []
    assert [m.body for m in memory_broker.receive(queue)] == ['arrived']   # visible at once
    intake.close()
