"""The task message: what to run, with what, and its delivery history.

A :class:`Message` is plain data. :mod:`kale.codec` turns it into the signed
body that travels through SQS and back; :mod:`kale.registry` finds the task
class it names.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any, Mapping

ATTR_TASK_ID = 'kale_task_id'
ATTR_TASK_NAME = 'kale_task_name'
ATTR_RETRY_NUM = 'kale_retry_num'
ATTR_FAILURE_NUM = 'kale_failure_num'
#: Attributes whose values are whole numbers.
NUMBER_ATTRIBUTES = (ATTR_RETRY_NUM, ATTR_FAILURE_NUM)
#: Set on dead-letter copies: why the message could not be handled, and where it came from.
ATTR_DEAD_LETTER_REASON = 'kale_dead_letter_reason'
ATTR_SOURCE_QUEUE = 'kale_source_queue'


@dataclasses.dataclass(frozen=True)
class Message:
    """One task invocation: what to run, with what, and its delivery history."""

    task_id: str
    task_name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    app_data: Any = None
    retry_num: int = 0
    failure_num: int = 0
    enqueued_at: float = 0.0
    publisher: str = ''
    #: Earlier deliveries that ended with nobody settling the message (the
    #: worker holding it died), carried over when it is re-sent as a copy.
    #: Travels in the signed envelope, not in the payload.
    unsettled: int = 0
    #: When the task was first published (epoch seconds; 0: now). Retry and
    #: release copies keep it, so the replay window (MESSAGE_MAX_AGE_SEC)
    #: counts from the first publish. Travels in the signed envelope.
    issued_at: float = 0.0
    #: Context carried with the task, as strings (e.g. a W3C trace context,
    #: added by a publish hook). Travels in the signed envelope, so the worker
    #: can trust it; retry, release and dead-letter copies keep it.
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def attributes(self) -> dict[str, Any]:
        """SQS message attributes, so operators see these without decoding."""
        return {ATTR_TASK_ID: self.task_id, ATTR_TASK_NAME: self.task_name,
                ATTR_RETRY_NUM: self.retry_num, ATTR_FAILURE_NUM: self.failure_num}

    def next_attempt(self) -> 'Message':
        """The copy to publish for a retry after a failure (counts incremented)."""
        return dataclasses.replace(self, retry_num=self.retry_num + 1,
                                   failure_num=self.failure_num + 1,
                                   enqueued_at=time.time(), publisher=publisher_identity())

    def to_payload(self) -> dict[str, Any]:
        """The serialized part (the envelope carries the task id and path again,
        with ``unsettled`` and ``issued_at``)."""
        return {'id': self.task_id, 'task': self.task_name, 'args': tuple(self.args),
                'kwargs': dict(self.kwargs), 'app_data': self.app_data,
                'retry_num': self.retry_num, 'failure_num': self.failure_num,
                'enqueued_at': self.enqueued_at, 'publisher': self.publisher}

    @classmethod
    def from_payload(cls, payload: Any, **envelope: Any) -> 'Message':
        """Build from a deserialized payload (and fields the envelope carries,
        ``issued_at``, ``unsettled`` and ``context``, and the counts, which win over
        the payload's); ValueError says what is wrong."""
        if type(payload) is not dict:
            raise ValueError('payload is a %s, not a mapping' % type(payload).__name__)
        get = payload.get
        task_id, task_name, args, kwargs = get('id'), get('task'), get('args'), get('kwargs')
        if task_id is None or task_name is None or args is None or kwargs is None:
            missing = {'id', 'task', 'args', 'kwargs'} - set(payload)
            raise ValueError('payload lacks %s' % ', '.join(sorted(missing)))
        retry_num, failure_num = get('retry_num', 0), get('failure_num', 0)
        unsettled, enqueued_at = get('unsettled', 0), get('enqueued_at', 0.0)
        publisher = get('publisher', '')
        for key, value, kinds in (('id', task_id, _TEXT), ('task', task_name, _TEXT),
                                  ('args', args, _SEQUENCE), ('kwargs', kwargs, _MAPPING),
                                  ('retry_num', retry_num, _WHOLE),
                                  ('failure_num', failure_num, _WHOLE),
                                  ('unsettled', unsettled, _WHOLE),
                                  ('enqueued_at', enqueued_at, _NUMBER),
                                  ('publisher', publisher, _TEXT)):
            if type(value) not in kinds:
                raise ValueError('payload field %r has type %s' % (key, type(value).__name__))
        if kwargs and not all(type(name) is str for name in kwargs):
            raise ValueError('payload kwargs have a non-string name')
        if retry_num < 0 or failure_num < 0 or unsettled < 0:
            raise ValueError('payload has a negative count')
        fields = {'retry_num': retry_num, 'failure_num': failure_num,
                  'unsettled': unsettled, 'issued_at': 0.0}
        fields.update(envelope)
        return cls(task_id, task_name, tuple(args), kwargs, get('app_data'),
                   enqueued_at=float(enqueued_at), publisher=publisher, **fields)


# Exact types a payload field may have (bool is not a whole number here).
_TEXT = (str,)
_SEQUENCE = (list, tuple)
_MAPPING = (dict,)
_WHOLE = (int,)
_NUMBER = (int, float)


def publisher_identity() -> str:
    """Who published: host name and process id."""
    return '%s[%d]' % (socket.gethostname(), os.getpid())
