"""The runner turns a received message into its outcome and copy."""
import dataclasses
import time

from kale import codec as kale_codec
from kale import message as kale_message
from kale.conf import settings
from kale.message import ATTR_DEAD_LETTER_REASON, ATTR_SOURCE_QUEUE
from kale.queue_config import get_queue_config
from kale.task import PERMANENT_FAILURE_NON_RETRIABLE, PERMANENT_FAILURE_RETRIES_EXHAUSTED
from kale.transport import ReceivedMessage
from kale.worker.batch import Outcome
from kale.worker.runner import TaskRunner
from tests import tasks


def received_for(task_class, *args, retry_num=0, failure_num=0, **kwargs):
    message = kale_message.Message('tid-%s' % task_class.__name__, task_class.task_path(), args,
                                   kwargs, retry_num=retry_num, failure_num=failure_num)
    outgoing = kale_codec.to_outgoing(message)
    return ReceivedMessage('mid', 'handle', outgoing.body,
                           {k: str(v) for k, v in outgoing.attributes.items()})


def run(received):
    queue = get_queue_config()['default']
    runner = TaskRunner()
    decoded = runner.decode(queue, received)
    if not isinstance(decoded, tuple):
        return decoded
    return runner.run(queue, received, *decoded)


def test_success():
    settlement = run(received_for(tasks.AddTask, 1, 2))
    assert settlement.outcome is Outcome.SUCCEEDED
    assert settlement.copy is None


def test_skipped():
    assert run(received_for(tasks.SkippedTask)).outcome is Outcome.SKIPPED


def test_failure_makes_a_delayed_retry_copy_with_incremented_counts():
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=10):
        settlement = run(received_for(tasks.FailingTask, retry_num=2, failure_num=1))
    assert settlement.outcome is Outcome.RETRY
    assert settlement.reason == 'RuntimeError: boom'
    assert settlement.copy.delay_sec == 40
    copy = kale_codec.decode(settlement.copy.body)
    assert (copy.task_id, copy.retry_num, copy.failure_num) == ('tid-FailingTask', 3, 2)
    assert settlement.copy.attributes['kale_retry_num'] == 3


def test_exhausted_retries_make_a_dead_letter_copy_with_the_reason():
    settlement = run(received_for(tasks.FailingTask, failure_num=tasks.FailingTask.max_retries))
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason == '%s: RuntimeError: boom' % PERMANENT_FAILURE_RETRIES_EXHAUSTED
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON] == settlement.reason
    assert settlement.copy.attributes[ATTR_SOURCE_QUEUE] == 'default'
    assert kale_codec.decode(settlement.copy.body).failure_num == tasks.FailingTask.max_retries + 1


def test_non_retriable_exception_is_dead_lettered_at_once():
    settlement = run(received_for(tasks.NonRetriableTask))
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason.startswith(PERMANENT_FAILURE_NON_RETRIABLE)


def test_time_limit_stops_the_run_and_counts_as_a_failure():
    started = time.monotonic()
    settlement = run(received_for(tasks.SleepTask, 10))
    assert time.monotonic() - started < tasks.SleepTask.time_limit + 0.5
    assert settlement.outcome is Outcome.RETRY
    assert 'TimeLimitExceeded' in settlement.reason


def test_undecodable_body_is_dead_lettered_verbatim_with_its_reason():
    received = ReceivedMessage('mid', 'handle', 'garbage', {})
    settlement = run(received)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.copy.body == 'garbage'
    assert settlement.copy.attributes[ATTR_DEAD_LETTER_REASON].startswith('not_kale_message')


def test_unknown_task_is_dead_lettered():
    received = received_for(tasks.AddTask, 1, 2)
    message = dataclasses.replace(kale_codec.decode(received.body), task_name='tests.tasks.Gone')
    received = ReceivedMessage('mid', 'h', kale_codec.encode(message), {})
    settlement = run(received)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert settlement.reason.startswith('unknown_task')


def test_a_broken_retry_policy_dead_letters_instead_of_crashing():
    class Broken(tasks.FailingTask):
        @classmethod
        def retry_delay_sec(cls, retry_num):
            raise ValueError('oops')
    queue = get_queue_config()['default']
    received = received_for(tasks.FailingTask)
    message = kale_codec.decode(received.body)
    settlement = TaskRunner().run(queue, received, message, Broken)
    assert settlement.outcome is Outcome.DEAD_LETTER
    assert 'retry policy failed' in settlement.reason
