"""The checks a publish call passes before anything is encoded or sent,
each failure its own exception naming the task and the bad value: the
queue's ids and delay (FIFO, fair), the task's time limit against its
queue, the arguments against ``run_task``'s signature, the queue itself, a
batch's calls and the deduplication ids a FIFO queue needs."""
from __future__ import annotations

import inspect
import numbers
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from kale.config import Config
from kale.exceptions import InvalidDelayError, InvalidGroupError, InvalidTimeLimitError, PublishError
from kale.fair import check_group_id, valid_group_id
from kale.message import Message
from kale.queue_config import QueueConfig, TaskQueue
from kale.transport import MAX_VISIBILITY_SEC

if TYPE_CHECKING:
    from kale.task import Task


def check_fifo_ids(task_name: str, queue: TaskQueue, group_id: Any, dedup_id: Any,
                   delay: Any) -> None:
    """A FIFO queue needs a ``group_id`` and takes no delay; a standard one
    takes no ``dedup_id``, and a ``group_id`` (its tenant) only when fair."""
    if not queue.fifo:
        if dedup_id is not None:
            raise InvalidGroupError(
                'task %s: dedup_id is only for FIFO queues, and queue %r is not one (set fifo: '
                'true in the queue config)' % (task_name, queue.name))
        check_group_id(task_name, queue, group_id)
        return
    if group_id is None:
        raise InvalidGroupError('task %s: queue %r is a FIFO queue: publish needs group_id=, '
                                'the group whose tasks run in order' % (task_name, queue.name))
    for name, value in (('group_id', group_id), ('dedup_id', dedup_id)):
        if value is not None and not valid_group_id(value):
            raise InvalidGroupError('task %s: %s must be 1-128 letters, digits or punctuation, '
                                    'got %r' % (task_name, name, value))
    if delay:                   # the delay_sec or eta given
        raise InvalidDelayError('task %s: queue %r is a FIFO queue, which cannot delay a '
                                'message; got %s=%r' % (task_name, queue.name, 'delay_sec' if
                                                        isinstance(delay, numbers.Real) else
                                                        'eta', delay))


def check_time_limit(task_class: type['Task'], queue: TaskQueue) -> None:
    """``time_limit`` must be a positive number of seconds, at most SQS's 12 hours."""
    limit = task_class.time_limit
    name = task_class.task_path()
    if isinstance(limit, bool) or not isinstance(limit, numbers.Real) or not limit > 0:
        raise InvalidTimeLimitError('task %s: time_limit must be a positive number of seconds, '
                                    'got %r' % (name, limit))
    if limit > MAX_VISIBILITY_SEC:
        raise InvalidTimeLimitError(
            'task %s: time_limit %gs is over 12 hours (%d s), the longest SQS keeps a message '
            'invisible' % (name, limit, MAX_VISIBILITY_SEC))


_signatures: dict[type, Optional[inspect.Signature]] = {}


def check_arguments(task_class: type['Task'], args: tuple, kwargs: Mapping[str, Any],
                    config: Config) -> None:
    """The arguments must bind to ``run_task``'s signature, or PublishError
    naming the task and the problem (unless the task or CHECK_TASK_ARGUMENTS
    turns the check off)."""
    if not (config.CHECK_TASK_ARGUMENTS
            and getattr(task_class, 'check_arguments', True)):
        return
    if task_class not in _signatures:
        try:
            _signatures[task_class] = inspect.signature(task_class.run_task)
        except (TypeError, ValueError):          # a signature Python cannot read
            _signatures[task_class] = None
    signature = _signatures[task_class]
    if signature is None:
        return
    try:
        signature.bind(None, *args, **kwargs)     # None stands for self
    except TypeError as exc:
        shown = str(signature).replace('(self, ', '(', 1).replace('(self)', '()', 1)
        raise PublishError('task %s: arguments do not match run_task%s: %s'
                           % (task_class.task_path(), shown, exc)) from None


def task_queue(task_class: type['Task'], queues: QueueConfig,
               queue_name: Optional[str] = None) -> TaskQueue:
    """The configured queue the task publishes to, its time limit checked."""
    queue = queues.get_queue(queue_name or task_class.queue,
                             who='task %s' % task_class.task_path())
    check_time_limit(task_class, queue)
    return queue


def call_pair(task_name: str, number: int, call: Any) -> tuple[tuple, dict]:
    """Call ``number`` of a batch as an ``(args, kwargs)`` pair, or PublishError."""
    if not (isinstance(call, (tuple, list)) and len(call) == 2
            and isinstance(call[0], (tuple, list)) and isinstance(call[1], Mapping)):
        raise PublishError('task %s: publish_batch call #%d must be an (args, kwargs) pair, got %r'
                           % (task_name, number, call))
    return tuple(call[0]), dict(call[1])


def dedup_ids(task_name: str, queue: TaskQueue, messages: Sequence[Message],
              dedup_id: Optional[str]) -> list[str]:
    """Each message's FIFO deduplication id (``dedup_id`` for one, else its task id)."""
    if dedup_id is not None and len(messages) > 1:
        raise InvalidGroupError('task %s: dedup_id is for one task; publish_batch '
                                'deduplicates each task by its task id' % task_name)
    if not queue.fifo:
        return []
    found = [dedup_id or m.task_id for m in messages]
    for task_dedup_id in found:
        if not valid_group_id(task_dedup_id):
            raise InvalidGroupError('task %s: its task id %r cannot be a deduplication id '
                                    '(1-128 letters, digits or punctuation); pass dedup_id='
                                    % (task_name, task_dedup_id))
    return found
