"""The runner turns a received message into its outcome and copy."""
import dataclasses
import time

import pytest

from kale import message as kale_message
from kale.events import Outcome, Settlement
from kale.message import ATTR_DEAD_LETTER_REASON, ATTR_SOURCE_QUEUE
from kale.task import PERMANENT_FAILURE_NON_RETRIABLE, PERMANENT_FAILURE_RETRIES_EXHAUSTED
from kale.transport import ReceivedMessage
from kale.worker.runner import TaskRunner
from tests import tasks
from tests.support.received import QUEUE, batch_for, received_for
from tests.support.records import recorded_ids


def run(received, app):
    """The settlement of ``received`` by a runner of ``app``."""
    batch = batch_for(received)
    runner = TaskRunner(app=app)
    opened = runner.open(batch, received)
    if isinstance(opened, Settlement):
        return opened
    message = runner.read(batch, received, opened)
    if isinstance(message, Settlement):
        return message
    return runner.run(batch, received, message, opened.task_class)


def test_success(app):
    settlement = run(received_for(tasks.AddTask, 1, 2), app)
    assert settlement.outcome is Outcome.SUCCEEDED
    assert settlement.copy is None


def test_skipped(app):
    assert run(received_for(tasks.SkippedTask), app).outcome is Outcome.SKIPPED


def test_failure_makes_a_delayed_retry_copy_with_incremented_counts(app):
    settlement = run(received_for(tasks.FailingTask, retry_num=2, failure_num=1),
                     app.replace(RETRY_DELAY_MULTIPLE_SEC=10))
    assert settlement.outcome is Outcome.RETRY
    assert settlement.reason == 'RuntimeError: boom'
    assert settlement.copy.delay_sec == 40
    copy = app.codec.decode(settlement.copy.body, QUEUE)
    assert (copy.task_id, copy.retry_num, copy.failure_num) == ('tid-FailingTask', 3, 2)
    assert settlement.copy.attributes['kale_retry_num'] == 3


def test_exhausted_retries_make_a_dead_letter_copy_with_the_reason(app):
    settlement = run(received_for(tasks.FailingTask, failure_num=tasks.FailingTask.max_retries),
                     app)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason == '%s: RuntimeError: boom' % PERMANENT_FAILURE_RETRIES_EXHAUSTED
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON] == settlement.reason
    assert settlement.copy.attributes[ATTR_SOURCE_QUEUE] == 'default'
    assert app.codec.decode(settlement.copy.body, QUEUE).failure_num == \
        tasks.FailingTask.max_retries + 1


def test_non_retriable_exception_is_dead_lettered_at_once(app):
    settlement = run(received_for(tasks.NonRetriableTask), app)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason.startswith(PERMANENT_FAILURE_NON_RETRIABLE)


@pytest.mark.real_time('the time limit is a real SIGALRM')
def test_time_limit_stops_the_run_and_counts_as_a_failure(app):
    started = time.monotonic()
    settlement = run(received_for(tasks.SleepTask, 30), app)
    # Cut at its limit, not after its 30 s (a loaded machine may add seconds).
    assert tasks.SleepTask.time_limit <= time.monotonic() - started < tasks.SleepTask.time_limit + 5
    assert settlement.outcome is Outcome.RETRY
    assert 'TimeLimitExceeded' in settlement.reason


def test_undecodable_body_is_dead_lettered_verbatim_with_its_reason(app):
    received = ReceivedMessage('mid', 'handle', 'garbage', {})
    settlement = run(received, app)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.copy.body == 'garbage'
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON].startswith('not_kale_message')


def test_unknown_task_is_dead_lettered(app):
    received = received_for(tasks.AddTask, 1, 2)
    message = dataclasses.replace(app.codec.decode(received.body, QUEUE), task_name='tests.tasks.Gone')
    received = ReceivedMessage('mid', 'h', app.codec.encode(message, QUEUE).body, {})
    settlement = run(received, app)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason.startswith('unknown_task')


def test_a_broken_retry_policy_dead_letters_instead_of_crashing(app):
    class Broken(tasks.FailingTask):
        @classmethod
        def retry_delay_sec(cls, retry_num):
            raise ValueError('oops')
    received = received_for(tasks.FailingTask)
    message = app.codec.decode(received.body, QUEUE)
    settlement = TaskRunner(app=app).run(batch_for(received), received, message, Broken)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert 'retry policy failed' in settlement.reason


def test_copies_keep_the_first_issue_time_and_are_signed_for_the_queue(app):
    message = kale_message.Message('tid', tasks.FailingTask.task_path(), published_at=1000.0)
    lenient = app.replace(MESSAGE_MAX_AGE_SEC=10 ** 10)
    received = ReceivedMessage('mid', 'h', lenient.codec.encode(message, QUEUE).body, {})
    settlement = run(received, lenient)
    frame = lenient.codec.open(settlement.copy.body, QUEUE)
    assert settlement.outcome is Outcome.RETRY
    assert frame.published_at == 1000.0 and frame.headers['q'] == QUEUE


def test_an_expired_body_is_dead_lettered_unrun(app, record):
    message = kale_message.Message('tid', tasks.RecordTask.task_path(), ('x',),
                                   published_at=app.clock.time() - 3 * 24 * 3600)
    received = ReceivedMessage('mid', 'h', app.codec.encode(message, QUEUE).body, {})
    settlement = run(received, app.replace(MESSAGE_MAX_AGE_SEC=2 * 24 * 3600))
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON].startswith('expired: ')
    assert settlement.copy.body == received.body
    assert recorded_ids(record, 'ran') == []


def test_a_body_replayed_into_another_queue_is_dead_lettered_unrun(app, record):
    message = kale_message.Message('tid', tasks.RecordTask.task_path(), ('x',))
    received = ReceivedMessage('mid', 'h', app.codec.encode(message, 'tq-high').body, {})
    settlement = run(received, app)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON].startswith('wrong_queue: ')
    assert recorded_ids(record, 'ran') == []


def test_a_task_outside_task_modules_is_never_imported(app, tmp_path, monkeypatch):
    (tmp_path / 'outside_tasks.py').write_text('open(%r, "w").close()\n'
                                               % str(tmp_path / 'imported'))
    monkeypatch.syspath_prepend(str(tmp_path))
    message = kale_message.Message('tid', 'outside_tasks.Anything')
    received = ReceivedMessage('mid', 'h', app.codec.encode(message, QUEUE).body, {})
    settlement = run(received, app.replace(TASK_MODULES=['tests.tasks']))
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason.startswith("unknown_task: task 'outside_tasks.Anything' is outside "
                                        'TASK_MODULES')
    assert not (tmp_path / 'imported').exists()
    assert settlement.verified and settlement.task_id == 'tid'
