"""A pool stops whenever the stop comes: a SIGTERM at any step of a job's way
(arrived, started but not yet begun by a thread or the loop, running, ended)
ends the worker with every message settled or given back; a job whose run no
thread holds is given back, saying so; a second SIGTERM ends the worker
whatever still runs (in-process, memory transport)."""
from __future__ import annotations

import logging
import signal
import threading

import pytest

from kale.hooks import WorkerHooks
from kale.worker import EXIT_OK, Worker
from kale.worker import signals as worker_signals
from tests import pool_tasks, tasks
from tests.support.records import recorded_ids

#: Bound on a worker's exit in these tests; it exits in milliseconds when right.
EXIT_BOUND_SEC = 30

TASKS = {'threads': tasks.RecordTask, 'asyncio': pool_tasks.AsyncRecordTask}


class StopAt(WorkerHooks):
    """Stops the worker at one step of the first job's way."""

    def __init__(self, step: str):
        self.step = step
        self.worker = None

    def on_worker_startup(self, worker):
        self.worker = worker

    def before_batch(self, queue, batch):
        if self.step == 'arrived':
            self.worker.stop()

    def on_task_started(self, queue, received, message):
        if self.step == 'running':
            self.worker.stop()

    def on_task_finished(self, settlement):
        if self.step == 'ended':
            self.worker.stop()


def run_to_exit(worker) -> int:
    """Run the worker; fail if it does not exit (its jobs then dropped so it can)."""
    exited = threading.Event()
    waited_for: list[str] = []

    def bound() -> None:
        if not exited.wait(EXIT_BOUND_SEC):
            waited_for.extend(sorted(str(job) for job in worker.running))
            worker.running.clear()
    threading.Thread(target=bound, daemon=True).start()
    try:
        code = worker.run()
    finally:
        exited.set()
    assert not waited_for, 'the stopping worker did not exit; it waited for %s' % waited_for
    return code


def hold_runs(worker, held: list) -> None:
    """The worker's jobs are started, but no thread (nor the loop) begins their
    runs until the test hands them over; the stop comes meanwhile."""
    def start(job, now):
        held.append((job, now))
        worker.stop()
    worker.jobs.start = start


@pytest.mark.parametrize('pool', ['threads', 'asyncio'])
@pytest.mark.parametrize('step, runs', [('arrived', 0), ('taken', 0), ('running', 1),
                                        ('ended', 1)])
def test_a_stop_at_any_step_of_a_job_ends_the_worker_with_its_message_settled(
        memory_broker, record, pool, step, runs):
    task_id = TASKS[pool].publish(None, 'x')
    worker = Worker(queue_names=['default'], broker=memory_broker, pool=pool,
                    hooks=[StopAt(step)])
    held: list = []
    if step == 'taken':
        hold_runs(worker, held)
    assert run_to_exit(worker) == EXIT_OK
    if held:                            # a run handed over late does not begin
        runner = type(worker.jobs)
        for job, now in held:
            runner.start(worker.jobs, job, now)
        worker.jobs.flush()
        worker.jobs.threads.close()
        assert worker.events.empty()
    assert recorded_ids(record, 'ran') == [task_id] * runs
    counts = memory_broker.counts(memory_broker.queues['default'])
    assert (counts.visible, counts.in_flight) == (1 - runs, 0)


def test_a_stopping_worker_gives_up_on_a_job_no_thread_holds_saying_so(
        memory_broker, record, caplog):
    """A job the worker counts as running but that no thread ever took (its
    hand-over lost) is given back when the worker stops, with a line naming it."""
    task_id = tasks.RecordTask.publish(None, 'x')
    worker = Worker(queue_names=['default'], broker=memory_broker, pool='threads')
    lost = []
    worker.threads.submit = lambda call: (lost.append(call), worker.stop())
    with caplog.at_level(logging.INFO, logger='kale.worker'):
        assert run_to_exit(worker) == EXIT_OK
    assert len(lost) == 1 and recorded_ids(record, 'ran') == []
    assert any(task_id in r.getMessage() and 'given back' in r.getMessage()
               and 'before its run began' in r.getMessage() for r in caplog.records)
    counts = memory_broker.counts(memory_broker.queues['default'])
    assert (counts.visible, counts.in_flight) == (1, 0)


class SignalTwiceAtStart(WorkerHooks):
    """Sends the worker two shutdown signals once its task blocks."""

    def on_worker_startup(self, worker):
        self.worker = worker

    def on_task_started(self, queue, received, message):
        def twice():
            pool_tasks.BLOCKING.wait(EXIT_BOUND_SEC)
            self.worker.signals.handle(signal.SIGTERM, None)
            self.worker.signals.handle(signal.SIGTERM, None)
        threading.Thread(target=twice).start()


def test_a_second_signal_ends_the_worker_whatever_still_runs(memory_broker, record, caplog,
                                                             monkeypatch):
    """A run blocked in one C call cannot be interrupted; the worker gives up
    on it GIVE_UP_SEC after the second signal, releases its message and exits
    (without it, the worker waited for the run's time limit and the stuck grace)."""
    monkeypatch.setattr(worker_signals, 'SECOND_SIGNAL_MIN_GAP_SEC', 0.0)
    pool_tasks.BLOCKING.clear()
    pool_tasks.BLOCKED.clear()
    task_id = pool_tasks.BlockedTask.publish(None)
    worker = Worker(queue_names=['default'], broker=memory_broker, pool='threads',
                    hooks=[SignalTwiceAtStart()])
    try:
        with caplog.at_level(logging.INFO, logger='kale.worker'):
            assert run_to_exit(worker) == EXIT_OK
    finally:
        pool_tasks.BLOCKED.set()        # the blocked thread ends
    assert recorded_ids(record, 'start') == [task_id]
    assert worker.stats == {'release': 1}
    assert any(task_id in r.getMessage() and 'gave up on' in r.getMessage()
               for r in caplog.records)
    counts = memory_broker.counts(memory_broker.queues['default'])
    assert (counts.visible, counts.in_flight) == (1, 0)


class Claimed:
    """A job runner whose jobs' runs have all begun."""

    def withdraw(self, job):
        return False


class Job:
    stuck = False

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


def test_a_stopping_worker_names_the_runs_it_still_waits_for_every_ten_seconds(caplog):
    from kale.worker.stopping import SAY_WAITING_EVERY_SEC, Stopping
    from tests.support.clock import FakeClock
    clock = FakeClock()
    stopping = Stopping('w', Claimed(), clock)
    running = [Job('task a (T)'), Job('task b (T)')]
    with caplog.at_level(logging.INFO, logger='kale.worker'):
        assert stopping.left_behind(running) == []
        clock.advance(SAY_WAITING_EVERY_SEC - 1)
        stopping.left_behind(running)
        assert caplog.records == []
        clock.advance(1)
        stopping.left_behind(running)
        stopping.left_behind(running)
    [line] = [r.getMessage() for r in caplog.records]
    assert 'still waiting for 2 run(s): task a (T), task b (T)' in line
