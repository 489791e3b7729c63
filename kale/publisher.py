"""Publishing: validate a task invocation, encode it, hand it to the broker.

Every check runs before anything is sent, and each failure has its own
exception naming the task and the bad value: the queue must be configured,
``time_limit`` must fit the queue's visibility timeout, ``delay_sec`` must be
within 0..900, the arguments must serialize, and the message must fit
``SQS_TASK_SIZE_LIMIT``. A batch is checked whole before any of it is sent.
"""
from __future__ import annotations

import logging
import math
import numbers
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Protocol, Sequence

from kale import message as kale_message
from kale.exceptions import (BatchSendError, InvalidDelayError, InvalidTimeLimitError,
                             PublishError)
from kale.message import Message
from kale.queue_config import TaskQueue, get_queue_config
from kale.transport import OutgoingMessage

if TYPE_CHECKING:
    from kale.task import Task

logger = logging.getLogger(__name__)

MAX_DELAY_SEC = 900


class Sender(Protocol):
    """What the publisher sends through: :class:`kale.broker.Broker`, or the eager runner."""

    def send(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        ...


def check_delay(task_name: str, delay_sec: Any) -> int:
    """``delay_sec`` as whole seconds for SQS (rounded up), or InvalidDelayError."""
    if isinstance(delay_sec, bool) or not isinstance(delay_sec, numbers.Real) \
            or math.isnan(delay_sec) or not 0 <= delay_sec <= MAX_DELAY_SEC:
        raise InvalidDelayError('task %s: delay_sec must be a number of seconds within 0..%d, '
                                'got %r' % (task_name, MAX_DELAY_SEC, delay_sec))
    return int(math.ceil(delay_sec))


def check_time_limit(task_class: type['Task'], queue: TaskQueue) -> None:
    """``time_limit`` must be a positive number below the queue's visibility timeout."""
    limit = task_class.time_limit
    name = task_class.task_path()
    if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not limit > 0:
        raise InvalidTimeLimitError('task %s: time_limit must be a positive number of seconds, '
                                    'got %r' % (name, limit))
    if limit >= queue.visibility_timeout_sec:
        raise InvalidTimeLimitError(
            'task %s: time_limit %gs is not below visibility_timeout_sec %ds of queue %r'
            % (name, limit, queue.visibility_timeout_sec, queue.name))


def task_queue(task_class: type['Task']) -> TaskQueue:
    """The configured queue the task publishes to, with its time limit checked."""
    queue = get_queue_config().get_queue(task_class.queue, who='task %s' % task_class.task_path())
    check_time_limit(task_class, queue)
    return queue


def _call_pair(task_name: str, number: int, call: Any) -> tuple[tuple, dict]:
    if not (isinstance(call, (tuple, list)) and len(call) == 2
            and isinstance(call[0], (tuple, list)) and isinstance(call[1], Mapping)):
        raise PublishError('task %s: publish_batch call #%d must be an (args, kwargs) pair, got %r'
                           % (task_name, number, call))
    return tuple(call[0]), dict(call[1])


class Publisher:
    """Builds, checks and sends task messages."""

    def __init__(self, sender: Optional[Sender] = None):
        self._sender = sender

    @property
    def sender(self) -> Sender:
        if self._sender is None:
            from kale.broker import get_broker
            return get_broker()
        return self._sender

    def build(self, task_class: type['Task'], app_data: Any, args: tuple,
              kwargs: Mapping[str, Any]) -> Message:
        """A new message for one invocation."""
        return Message(task_id=task_class.make_task_id(*args, **kwargs),
                       task_name=task_class.task_path(), args=tuple(args), kwargs=dict(kwargs),
                       app_data=app_data, enqueued_at=time.time(),
                       publisher=kale_message.publisher_identity())

    def publish(self, task_class: type['Task'], app_data: Any, args: tuple,
                kwargs: Mapping[str, Any], delay_sec: Any = 0) -> str:
        """Publish one invocation; returns its task id."""
        return self.publish_batch(task_class, app_data, [(args, kwargs)], delay_sec)[0]

    def publish_batch(self, task_class: type['Task'], app_data: Any, calls: Iterable[Any],
                      delay_sec: Any = 0) -> list[str]:
        """Publish many invocations of one task; returns their task ids in order."""
        name = task_class.task_path()
        delay = check_delay(name, delay_sec)
        queue = task_queue(task_class)
        messages = [self.build(task_class, app_data, *_call_pair(name, number, call))
                    for number, call in enumerate(calls)]
        if not messages:
            return []
        outgoing = [kale_message.to_outgoing(m, delay) for m in messages]
        task_ids = [m.task_id for m in messages]
        try:
            self.sender.send(queue, outgoing)
        except BatchSendError as exc:
            exc.task_ids = task_ids  # type: ignore[attr-defined]
            raise
        for m in messages:
            logger.debug('published task %s (%s) to queue %s', m.task_id, name, queue.name)
        return task_ids


_default: Optional[Publisher] = None


def get_publisher() -> Publisher:
    """The publisher ``Task.publish`` uses."""
    global _default
    if _default is None:
        _default = Publisher()
    return _default


def set_publisher(publisher: Optional[Publisher]) -> Optional[Publisher]:
    """Replace the publisher ``Task.publish`` uses (eager mode); returns the old one."""
    global _default
    previous, _default = _default, publisher
    return previous


def new_task_id() -> str:
    return uuid.uuid4().hex
