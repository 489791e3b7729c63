"""The eager helper runs tasks in-process through the real encode/decode path."""
import pytest

from kale import testing
from kale.conf import settings
from kale.exceptions import SerializationError, UnknownQueueError
from kale.task import SKIPPED
from tests import pool_tasks, tasks


def test_run_eagerly_returns_what_run_task_returned():
    assert testing.run_eagerly(tasks.AddTask, None, 2, 3) == 5


def test_an_async_task_runs_eagerly_to_its_end(record):
    """``async def run_task`` is awaited in eager mode: its result, not a
    coroutine object; its failure, raised."""
    assert testing.run_eagerly(pool_tasks.AsyncRecordTask, None, 'a', 'b') == 2
    with pytest.raises(ValueError, match='^bad input$'):
        testing.run_eagerly(pool_tasks.AsyncFailingTask, None)


def test_eager_publish_runs_the_task_with_its_app_data():
    with testing.eager() as runs:
        task_id = tasks.EchoTask.publish({'tenant': 1}, 'a', b=2, delay_sec=5)
    [run] = runs
    assert run.message.task_id == task_id
    assert run.result == {'args': ('a',), 'kwargs': {'b': 2}, 'app_data': {'tenant': 1}}


def test_eager_publish_batch_runs_every_call():
    with testing.eager() as runs:
        tasks.AddTask.publish_batch(None, [((1, 1), {}), ((2, 2), {})])
    assert [run.result for run in runs] == [2, 4]


def test_eager_mode_goes_through_serialization():
    with testing.eager():
        with pytest.raises(SerializationError):
            tasks.EchoTask.publish(None, lambda: 1)
    with settings.override(SERIALIZER='json'):
        with testing.eager() as runs:
            tasks.EchoTask.publish(None, (1, 2))
        assert runs[0].result['args'] == ([1, 2],)


def test_eager_mode_still_validates_the_queue():
    with testing.eager():
        with pytest.raises(UnknownQueueError):
            tasks.UnknownQueueTask.publish(None)


def test_task_exceptions_propagate_unless_asked_not_to():
    with testing.eager():
        with pytest.raises(RuntimeError, match='boom'):
            tasks.FailingTask.publish(None)
    with testing.eager(propagate=False) as runs:
        tasks.FailingTask.publish(None)
    assert isinstance(runs[0].exception, RuntimeError)


def test_eager_mode_needs_no_signing_key():
    with settings.override(MESSAGE_SIGNING_KEY=''):
        assert testing.run_eagerly(tasks.AddTask, None, 1, 1) == 2


def test_should_run_task_false_skips_the_run():
    tasks.SkippedTask.ran.clear()
    with testing.eager() as runs:
        tasks.SkippedTask.publish(None, 1)
    assert runs[0].result is SKIPPED
    assert tasks.SkippedTask.ran == []


def test_eager_mode_ends_with_the_block(monkeypatch):
    sent = []
    from kale import publisher

    class Recorder:
        def sqs_name(self, queue):
            return queue.name

        def send(self, queue, messages):
            sent.extend(messages)
            return ['x'] * len(messages)

    previous = publisher.set_publisher(publisher.Publisher(Recorder()))
    try:
        with testing.eager():
            tasks.AddTask.publish(None, 1, 1)
        tasks.AddTask.publish(None, 1, 1)
    finally:
        publisher.set_publisher(previous)
    assert len(sent) == 1
