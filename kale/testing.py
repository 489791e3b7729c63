"""Helpers for testing application tasks without SQS: eager mode runs a task
in the calling process as soon as it is published, through the worker's own
checks, encoding and decoding (docs/explanation/internals-top.md, "Eager mode
for tests")."""
from __future__ import annotations

import contextlib
import dataclasses
import secrets
from typing import Any, Iterator, Optional, Sequence

from kale import publisher as kale_publisher
from kale.app import App, default_app
from kale.exceptions import QueueConfigError
from kale.hooks import run_to_end
from kale.message import Message
from kale.publish_checks import check_time_limit
from kale.queue_config import TaskQueue
from kale.task import Task
from kale.transport import MAX_VISIBILITY_SEC, OutgoingMessage
from kale.transport.payloads import MemoryPayloadStore, using_payload_store


@dataclasses.dataclass
class EagerRun:
    """One task run in eager mode: its message, result or exception."""

    message: Message
    result: Any = None
    exception: Optional[BaseException] = None


def run_body(body: str, queue: str, app: Optional[App] = None) -> EagerRun:
    """Decode a signed body received on ``queue`` and run its task in this
    process, as a worker of ``app`` (by default the default app) would."""
    app = app or default_app()
    message = app.codec.decode(body, queue)
    task_class = app.registry.resolve(message.task_name)
    run = EagerRun(message)
    try:
        task = task_class(message)
        task.app = app
        if task_class.is_coroutine:         # async def run_task: awaited to its end
            run.result = run_to_end(task.arun(*message.args, **dict(message.kwargs)))
        else:
            run.result = task.run(*message.args, **dict(message.kwargs))
    except Exception as exc:
        run.exception = exc
    return run


class EagerSender:
    """A publisher's sender that runs each message instead of sending it."""

    def __init__(self, app: App, propagate: bool = True):
        self.app = app
        self.propagate = propagate
        self.runs: list[EagerRun] = []

    def sqs_name(self, queue: TaskQueue) -> str:
        return (self.app.config.QUEUE_PREFIX or '') + queue.name

    def send(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        ids = []
        for outgoing in messages:
            run = run_body(outgoing.body, self.sqs_name(queue), self.app)
            self.runs.append(run)
            ids.append(run.message.task_id)
            if run.exception is not None and self.propagate:
                raise run.exception
        return ids


class EagerPublisher(kale_publisher.Publisher):
    """A publisher that runs each task in-process, with or without a queue config."""

    def queue_of(self, task_class: type[Task], queue_name: Optional[str] = None) -> TaskQueue:
        try:
            _ = self.app.queues
        except QueueConfigError:        # none to read: the task's queue, as named
            check_time_limit(task_class, STAND_IN_QUEUE)
            return dataclasses.replace(STAND_IN_QUEUE, name=queue_name or task_class.queue)
        return super().queue_of(task_class, queue_name)


#: The queue a task runs on in eager mode when there is no queue config.
STAND_IN_QUEUE = TaskQueue(name='eager', priority=1, batch_size=10,
                           visibility_timeout_sec=MAX_VISIBILITY_SEC,
                           long_poll_time_sec=0, num_iterations=1)


@contextlib.contextmanager
def eager(propagate: bool = True) -> Iterator[list[EagerRun]]:
    """Within the block, ``Task.publish`` runs tasks in-process; yields the runs.

    Without MESSAGE_SIGNING_KEY set, a throwaway key is used for the block;
    payloads that would go to S3 stay in memory.
    """
    config = default_app().config
    if not config.MESSAGE_SIGNING_KEY:
        config = config.replace(MESSAGE_SIGNING_KEY=secrets.token_hex(32))
    app = App(config)
    sender = EagerSender(app, propagate)
    with using_payload_store(MemoryPayloadStore(config.PAYLOAD_BUCKET)):
        previous = kale_publisher.set_publisher(EagerPublisher(sender).given_parts(app))
        try:
            yield sender.runs
        finally:
            kale_publisher.set_publisher(previous)


def run_eagerly(task_class: type[Task], app_data: Any, *args: Any, **kwargs: Any) -> Any:
    """Publish one run of ``task_class`` eagerly and return what ``run_task`` returned."""
    with eager() as runs:
        task_class.publish(app_data, *args, **kwargs)
    return runs[0].result
