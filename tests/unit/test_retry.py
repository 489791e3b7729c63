"""RetryPolicy: what is retried, how long a retry waits, when retrying stops;
the runner applies it under the worker's configuration."""
from hypothesis import given
from hypothesis import strategies as st

from kale.app import App
from kale.events import Outcome
from kale.exceptions import ChildTaskError, NonRetriableTaskError
from kale.retry import (
    PERMANENT_FAILURE_NO_RETRIES,
    PERMANENT_FAILURE_NON_RETRIABLE,
    PERMANENT_FAILURE_RETRIES_EXHAUSTED,
    RetryPolicy,
)
from kale.transport import MAX_DELAY_SEC
from kale.worker.runner import TaskRunner, retry_decision
from tests import tasks
from tests.support.received import batch_for, received_for


def test_what_is_retried_and_when_retrying_stops():
    policy = RetryPolicy(max_retries=2, non_retriable=(KeyError,))
    assert policy.stop_reason(0, RuntimeError()) is None
    assert policy.stop_reason(1, RuntimeError()) is None
    assert policy.stop_reason(2, RuntimeError()) == PERMANENT_FAILURE_RETRIES_EXHAUSTED
    assert policy.stop_reason(0, KeyError()) == PERMANENT_FAILURE_NON_RETRIABLE
    assert policy.stop_reason(0, ChildTaskError('KeyError', retriable=True)) is None
    assert RetryPolicy(max_retries=0).stop_reason(0, RuntimeError()) == PERMANENT_FAILURE_NO_RETRIES
    assert RetryPolicy(max_retries=None).stop_reason(0) == PERMANENT_FAILURE_NO_RETRIES


def test_delays_double_up_to_the_maximum():
    policy = RetryPolicy(delay_multiple_sec=60, max_delay_sec=900)
    assert [policy.delay_sec(n) for n in range(6)] == [60, 120, 240, 480, 900, 900]
    assert RetryPolicy(delay_multiple_sec=0.5).delay_sec(0) == 1      # whole seconds, rounded up


@given(multiple=st.floats(0, 10_000), maximum=st.floats(0, 10_000), jitter=st.floats(0, 1),
       retry_num=st.integers(0, 10 ** 6), draw=st.floats(0, 1))
def test_every_delay_is_whole_seconds_within_sqs_limits_and_grows_without_jitter(
        multiple, maximum, jitter, retry_num, draw):
    policy = RetryPolicy(delay_multiple_sec=multiple, max_delay_sec=maximum, jitter=jitter)
    delay = policy.delay_sec(retry_num, uniform=lambda low, high: low + (high - low) * draw)
    assert isinstance(delay, int) and 0 <= delay <= MAX_DELAY_SEC
    assert delay <= max(maximum * (1 + jitter), 0) + 1
    steady = RetryPolicy(delay_multiple_sec=multiple, max_delay_sec=maximum)
    assert steady.delay_sec(retry_num) <= steady.delay_sec(retry_num + 1)


def test_a_task_delegates_to_its_policy():
    policy = tasks.FailingTask.retry_policy()
    assert policy.max_retries == tasks.FailingTask.max_retries
    assert NonRetriableTaskError in policy.non_retriable
    assert tasks.FailingTask.retry_delay_sec(1) == policy.delay_sec(1)


def test_the_runner_uses_the_workers_configuration():
    received = received_for(tasks.FailingTask)
    message = TaskRunner().read(batch_for(received), received,
                                TaskRunner().open(batch_for(received), received))
    quick = App(RETRY_DELAY_MULTIPLE_SEC=5, RETRY_DELAY_JITTER=0).config
    assert retry_decision(tasks.FailingTask, message, RuntimeError(), quick) == (None, 5)
    settlement = TaskRunner(config=quick).run(batch_for(received), received, message,
                                              tasks.FailingTask)
    assert settlement.outcome is Outcome.RETRY and settlement.retry_delay_sec == 5


def test_a_task_that_overrides_its_policy_keeps_its_own_answer():
    class Fixed(tasks.FailingTask):
        @classmethod
        def retry_delay_sec(cls, retry_num):
            return 7

        @classmethod
        def is_retriable(cls, exc):
            return not isinstance(exc, ZeroDivisionError)
    received = received_for(tasks.FailingTask)
    message = TaskRunner().read(batch_for(received), received,
                                TaskRunner().open(batch_for(received), received))
    config = App(RETRY_DELAY_MULTIPLE_SEC=5).config
    assert retry_decision(Fixed, message, RuntimeError(), config) == (None, 7)
    assert retry_decision(Fixed, message, ZeroDivisionError(), config) == \
        (PERMANENT_FAILURE_NON_RETRIABLE, 0)

