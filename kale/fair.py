"""Fair queues: the tenant of each task on a standard queue configured ``fair:
true`` (docs/explanation/internals-top.md, "Fair queues")."""
from __future__ import annotations

import dataclasses
import string
from typing import TYPE_CHECKING, Any, Optional, Sequence

from kale.exceptions import InvalidGroupError

if TYPE_CHECKING:
    from kale.message import Message
    from kale.queue_config import TaskQueue
    from kale.task import Task
    from kale.transport import OutgoingMessage

#: The characters SQS accepts in a message group id or deduplication id.
GROUP_ID_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)


def valid_group_id(value: Any) -> bool:
    """Whether SQS takes ``value`` as a MessageGroupId (or deduplication id):
    1..128 letters, digits or punctuation."""
    return isinstance(value, str) and 1 <= len(value) <= 128 \
        and GROUP_ID_CHARACTERS.issuperset(value)


def check_group_id(task_name: str, queue: 'TaskQueue', group_id: Any) -> None:
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
            messages: Sequence['Message']) -> list[str]:
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


def with_tenants(outgoing: Sequence['OutgoingMessage'],
                 found: Sequence[str]) -> list['OutgoingMessage']:
    """The messages, each sent with its tenant as its MessageGroupId."""
    return [dataclasses.replace(out, group_id=tenant) if tenant else out
            for out, tenant in zip(outgoing, found, strict=True)]


def keep_tenant(copy: 'OutgoingMessage', tenant: str) -> 'OutgoingMessage':
    """A worker's copy of a message received with ``tenant`` (its group on a
    fair queue), in the same tenant."""
    if copy.group_id or not tenant:
        return copy
    return dataclasses.replace(copy, group_id=tenant)
