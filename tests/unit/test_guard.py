"""The time-limit Guard a runner is given: TimeoutGuard over SignalTimeout,
and any other Guard plugged into the runner in its place."""
import pytest

from kale.events import Outcome
from kale.exceptions import TimeLimitExceeded
from kale.timeout import NoTimeout, SignalTimeout, TimeoutGuard
from kale.worker.runner import TaskRunner
from tests import tasks
from tests.support.received import batch_for, received_for


class Interrupt(BaseException):
    pass


def test_a_call_within_its_limit_returns_its_result():
    guard = TimeoutGuard(SignalTimeout)
    guard.setup()
    try:
        assert guard.run(lambda: 42, 5) == 42
        guard.after_batch()
    finally:
        guard.teardown()


def test_a_call_past_its_limit_raises_time_limit_exceeded():
    def spin():
        while True:
            pass
    with pytest.raises(TimeLimitExceeded, match='0.1s'):
        TimeoutGuard(SignalTimeout).run(spin, 0.1)


def test_a_call_that_swallows_the_limit_and_fails_otherwise_still_timed_out():
    def swallow():
        try:
            while True:
                pass
        except TimeLimitExceeded:
            raise ValueError('cleanup failed') from None
    with pytest.raises(TimeLimitExceeded) as raised:
        TimeoutGuard(SignalTimeout).run(swallow, 0.1)
    assert isinstance(raised.value.__cause__, ValueError)


def test_the_workers_own_interruption_passes_through_unchanged():
    def interrupted():
        try:
            while True:
                pass
        except TimeLimitExceeded:
            raise Interrupt() from None
    with pytest.raises(Interrupt):
        TimeoutGuard(SignalTimeout, passes_through=(Interrupt,)).run(interrupted, 0.1)


def test_no_timeout_enforces_nothing():
    assert TimeoutGuard(NoTimeout).run(lambda: 'done', 0.0) == 'done'


class RecordingGuard:
    """A Guard of another kind: what the runner asks of it."""

    def __init__(self):
        self.calls = []

    def setup(self):
        pass

    def teardown(self):
        pass

    def after_batch(self):
        pass

    def run(self, call, seconds, /, *args, **kwargs):
        self.calls.append(seconds)
        if seconds < 1:
            raise TimeLimitExceeded(seconds)
        return call(*args, **kwargs)


def test_the_runner_runs_every_task_through_the_guard_it_is_given():
    guard = RecordingGuard()
    runner = TaskRunner(guard)
    received = received_for(tasks.AddTask, 1, 2)
    batch = batch_for(received)
    opened = runner.open(batch, received)
    settlement = runner.run(batch, received, runner.read(batch, received, opened), tasks.AddTask)
    assert settlement.outcome is Outcome.SUCCEEDED and settlement.result == 3
    assert guard.calls == [tasks.AddTask.time_limit]


def test_a_limit_the_guard_enforces_fails_the_run():
    class Quick(tasks.AddTask):
        time_limit = 0.5
    runner = TaskRunner(RecordingGuard())
    received = received_for(tasks.AddTask, 1, 2)
    batch = batch_for(received)
    message = runner.read(batch, received, runner.open(batch, received))
    settlement = runner.run(batch, received, message, Quick)
    assert settlement.outcome is Outcome.RETRY
    assert 'TimeLimitExceeded' in settlement.reason
