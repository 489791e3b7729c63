"""The checks a publish call passes before anything is encoded or sent, each failure
its own exception naming the task and the bad value: queue, FIFO ids, tenants, time
limit, arguments, batch calls, labels, unique windows and the claims a unique task
makes (docs/explanation/internals-top.md, "Publishing")."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import numbers
import re
import string
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from kale.config import Config
from kale.exceptions import InvalidDelayError, InvalidGroupError, InvalidTimeLimitError, PublishError
from kale.message import Message
from kale.queue_config import QueueConfig, TaskQueue
from kale.transport import MAX_VISIBILITY_SEC, OutgoingMessage

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


#: The characters SQS accepts in a message group id or deduplication id.
GROUP_ID_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)


def valid_group_id(value: Any) -> bool:
    """Whether SQS takes ``value`` as a MessageGroupId (or deduplication id):
    1..128 letters, digits or punctuation."""
    return isinstance(value, str) and 1 <= len(value) <= 128 \
        and GROUP_ID_CHARACTERS.issuperset(value)


def check_group_id(task_name: str, queue: TaskQueue, group_id: Any) -> None:
    """``group_id`` on a standard queue: only where the queue is fair, and a
    valid MessageGroupId."""
    if group_id is None:
        return
    if not queue.fair:
        raise InvalidGroupError(
            'task %s: group_id is for FIFO and fair queues, and queue %r is neither (set fifo: '
            'true or fair: true in the queue config)' % (task_name, queue.name))
    if not valid_group_id(group_id):
        raise InvalidGroupError('task %s: group_id (its tenant on fair queue %r) must be 1-128 '
                                'letters, digits or punctuation, got %r'
                                % (task_name, queue.name, group_id))


def tenants(task_class: type['Task'], group_id: Optional[str],
            messages: Sequence[Message]) -> list[str]:
    """Each message's tenant on a fair queue ('' for none): ``group_id``, else
    the class's ``fair_key`` for the message's arguments."""
    if group_id is not None:
        return [group_id] * len(messages)
    key = getattr(task_class, 'fair_key', None)
    if key is None:
        return [''] * len(messages)
    name = task_class.task_path()
    if not callable(key):
        raise InvalidGroupError('task %s: fair_key must be a method, '
                                'def fair_key(self, *args, **kwargs), got %r' % (name, key))
    found = []
    for message in messages:
        task: Any = task_class(message)        # fair_key is the subclass's own
        value = task.fair_key(*message.args, **message.kwargs)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if value is not None and not valid_group_id(value):
            raise InvalidGroupError('task %s: fair_key returned %r; a tenant is None or 1-128 '
                                    'letters, digits or punctuation' % (name, value))
        found.append(value or '')
    return found


def with_tenants(outgoing: Sequence[OutgoingMessage],
                 found: Sequence[str]) -> list[OutgoingMessage]:
    """The messages, each sent with its tenant as its MessageGroupId."""
    return [dataclasses.replace(out, group_id=tenant) if tenant else out
            for out, tenant in zip(outgoing, found, strict=True)]


def keep_tenant(copy: OutgoingMessage, tenant: str) -> OutgoingMessage:
    """A worker's copy of a message received with ``tenant`` (its group on a
    fair queue), in the same tenant."""
    if copy.group_id or not tenant:
        return copy
    return dataclasses.replace(copy, group_id=tenant)


#: What a label key may be: it also appears in filters, ``label.KEY=VALUE``.
LABEL_KEY = re.compile(r'[A-Za-z0-9_.:-]{1,64}')
MAX_LABEL_CHARS = 256
MAX_LABELS = 32


def _label_value(value: Any) -> Any:
    """A label value as text when it is a number or a boolean; anything else as given."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _check_label(task_name: str, who: str, key: Any, value: Any) -> str:
    """The text of one label's value, or PublishError naming its bad key or value."""
    if not (isinstance(key, str) and LABEL_KEY.fullmatch(key)):
        raise PublishError('task %s: %s key %r must be 1-64 letters, digits or _.:-'
                           % (task_name, who, key))
    value = _label_value(value)
    if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
        raise PublishError('task %s: %s value of %r must be a string of at most %d '
                           'characters, got %r' % (task_name, who, key, MAX_LABEL_CHARS,
                                                   value))
    return value


def check_labels(task_name: str, labels: Any, who: str = 'labels') -> dict[str, str]:
    """Labels as a dict of strings, or PublishError naming the task and the
    bad entry. Numbers and booleans become their text."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise PublishError('task %s: %s must be a dict of strings, got %r' % (task_name, who, labels))
    if len(labels) > MAX_LABELS:
        raise PublishError('task %s: %s has %d entries, at most %d are allowed'
                           % (task_name, who, len(labels), MAX_LABELS))
    return {key: _check_label(task_name, who, key, value) for key, value in labels.items()}


#: The longest window a task may be unique for: a year, the longest delay.
MAX_UNIQUE_SEC = 365 * 24 * 3600


def _bad(value: Any) -> bool:
    """Whether ``value`` is not a window: seconds above 0 and at most
    MAX_UNIQUE_SEC (not a bool, not NaN)."""
    return isinstance(value, bool) or not isinstance(value, (int, float)) or \
        not 0 < value <= MAX_UNIQUE_SEC


def declared_problem(task_name: str, value: Any) -> Optional[str]:
    """The line refusing a class's ``unique_for_sec`` (None: it is good)."""
    if value is None or not _bad(value):
        return None
    return ('task %s: unique_for_sec must be None (not unique) or seconds above 0 and at most '
            '%d (a year); got %r' % (task_name, MAX_UNIQUE_SEC, value))


def unique_window(task_name: str, given: Any, declared: Any) -> Optional[float]:
    """The window a publish of ``task_name`` is unique for: ``given`` on the
    call (0: not unique for this call) or else the class's ``declared``;
    None when not unique. PublishError naming the task for a bad value."""
    if given is None:
        problem = declared_problem(task_name, declared)
        if problem:
            raise PublishError(problem)
        return None if declared is None else float(declared)
    if given == 0 and not isinstance(given, bool):
        return None
    if _bad(given):
        raise PublishError('task %s: unique_for_sec must be seconds above 0 and at most %d (a '
                           'year), or 0 for not unique on this call; got %r'
                           % (task_name, MAX_UNIQUE_SEC, given))
    return float(given)


def unique_key(task_name: str, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The key of a unique task's run: a SHA-256 of its path and arguments
    (as sorted JSON; what JSON cannot hold, by its repr)."""
    encoded = json.dumps([task_name, list(args), kwargs], sort_keys=True, default=repr,
                         separators=(',', ':'))
    return hashlib.sha256(encoded.encode('utf-8', 'surrogatepass')).hexdigest()


def unique_claims(config: Config, task_name: str, unique_sec: Optional[float],
                  pairs: Sequence[tuple[tuple, Mapping[str, Any]]],
                  messages: Sequence[Message]) -> Optional[list[tuple[str, str]]]:
    """(key, task id) of each run of a unique task; None for another task.
    PublishError without task records. ``unique_sec`` is the window
    :func:`unique_window` gave."""
    if unique_sec is None:
        return None
    if not config.RECORDS_URL:
        raise PublishError('task %s: unique_for_sec is decided in the task records: set '
                           'RECORDS_URL' % task_name)
    return [(unique_key(task_name, args, kwargs), m.task_id)
            for (args, kwargs), m in zip(pairs, messages, strict=True)]
