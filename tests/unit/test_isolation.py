"""TASK_ISOLATION = 'process': a task that hangs in C code or ignores the timeout
signal is still stopped at its limit, and a task that kills its process fails
instead of taking the worker down."""
import os
import time

import pytest

from kale import codec as kale_codec
from kale import message as kale_message
from kale.conf import settings
from kale.events import Outcome
from kale.exceptions import ChildTaskError, ImproperlyConfigured, TaskProcessDied, TimeLimitExceeded
from kale.queue_config import build_queue_config
from kale.task import SKIPPED
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch
from kale.worker.isolation import run_in_child
from kale.worker.runner import TaskRunner
from tests import tasks


def run(task_class, *args, isolation='process'):
    message = kale_message.Message('tid', task_class.task_path(), args)
    received = ReceivedMessage('mid', 'handle', kale_codec.encode(message, 'q'), {})
    runner = TaskRunner(isolation=isolation)
    started = time.monotonic()
    batch = Batch(build_queue_config(settings.config)['default'], [received], started, 'q')
    settlement = runner.run(batch, received, message, task_class)
    return settlement, time.monotonic() - started


@pytest.mark.parametrize('task_class', [tasks.RegexHangTask, tasks.IgnoresAlarmTask])
def test_a_task_that_cannot_be_interrupted_is_stopped_at_its_limit(task_class):
    settlement, took = run(task_class)
    # It never returns on its own: stopped at its limit, well before the
    # seconds a loaded machine might add to starting and ending its process.
    assert task_class.time_limit <= took < task_class.time_limit + 5
    assert settlement.outcome is Outcome.RETRY
    assert settlement.reason.startswith('TimeLimitExceeded')


def test_its_fate_is_the_same_as_any_timeout():
    hung, _ = run(tasks.RegexHangTask)
    slept, _ = run(tasks.SleepTask, 10, isolation='none')
    assert (hung.outcome, type(hung.exception)) == (slept.outcome, type(slept.exception))
    assert hung.copy.delay_sec == slept.copy.delay_sec
    assert kale_codec.decode(hung.copy.body, 'q').failure_num == 1


def test_a_task_that_kills_its_process_fails_that_run(tmp_path, monkeypatch):
    monkeypatch.setenv('KALE_TEST_RECORD', str(tmp_path / 'record'))
    settlement, _ = run(tasks.CrashEveryTimeTask)
    assert settlement.outcome is Outcome.RETRY
    assert settlement.reason == 'TaskProcessDied: task process killed by SIGKILL before reporting'


def test_results_skips_and_exceptions_come_back_from_the_child():
    assert run(tasks.AddTask, 2, 3)[0].outcome is Outcome.SUCCEEDED
    assert run(tasks.SkippedTask)[0].outcome is Outcome.SKIPPED
    custom, _ = run(tasks.RaisesCustomTask, 1)
    assert isinstance(custom.exception, tasks.CustomError)
    assert custom.reason == 'CustomError: custom (1,)'
    unpicklable, _ = run(tasks.UnpicklableErrorTask)
    assert type(unpicklable.exception) is ChildTaskError
    assert 'carries a lock' in unpicklable.reason
    assert unpicklable.outcome is Outcome.RETRY


def test_an_exception_that_cannot_come_back_whole_keeps_its_retry_decision():
    """RefusedError is non-retriable but cannot be rebuilt from its pickle."""
    settlement, _ = run(tasks.RefusesTask)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason == 'non_retriable: ChildTaskError: RefusedError: refused with code 7'
    in_process, _ = run(tasks.RefusesTask, isolation='none')
    assert in_process.outcome is Outcome.DEAD_LETTER


def test_kale_exceptions_survive_pickling():
    import pickle

    from kale.exceptions import BatchSendError, DecodeError, EndpointUnreachableError
    for exc in (TimeLimitExceeded(1.5), DecodeError('corrupt_body', 'x', 'body'),
                EndpointUnreachableError('down'), BatchSendError('b', {1: ('c', 'm')}, ['i', None]),
                ChildTaskError('x', False)):
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is type(exc) and str(copy) == str(exc)


def test_run_in_child_returns_values_and_raises_what_the_child_raised():
    assert run_in_child(lambda: {'answer': 42}, 5) == {'answer': 42}
    assert run_in_child(lambda: SKIPPED, 5) is SKIPPED
    with pytest.raises(ZeroDivisionError):
        run_in_child(lambda: 1 / 0, 5)
    with pytest.raises(TimeLimitExceeded):
        run_in_child(lambda: time.sleep(5), 0.2)
    with pytest.raises(TaskProcessDied, match='exited with code 7'):
        run_in_child(lambda: os._exit(7), 5)


def test_an_unknown_isolation_is_a_clear_error():
    with pytest.raises(ImproperlyConfigured,
                       match="TASK_ISOLATION must be one of 'none', 'process', got 'thread'"):
        TaskRunner(isolation='thread')
