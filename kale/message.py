"""The task message: what to run, with what, and its delivery history.

A :class:`Message` is plain data. :mod:`kale.codec` turns it into the signed
body that travels through SQS and back; :mod:`kale.registry` finds the task
class it names.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
import types
from typing import Any, Mapping, NoReturn

from kale import speed
from kale.events import process_identity

ATTR_TASK_ID = 'kale_task_id'
ATTR_TASK_NAME = 'kale_task_name'
ATTR_RETRY_NUM = 'kale_retry_num'
ATTR_FAILURE_NUM = 'kale_failure_num'
#: Attributes whose values are whole numbers.
NUMBER_ATTRIBUTES = (ATTR_RETRY_NUM, ATTR_FAILURE_NUM)
#: Set on dead-letter copies: why the message could not be handled, and where it came from.
ATTR_DEAD_LETTER_REASON = 'kale_dead_letter_reason'
ATTR_SOURCE_QUEUE = 'kale_source_queue'
#: Set on a dead run: the id of the task whose dead letter it handles.
ATTR_DEAD_OF = 'kale_dead_of'
#: Longest final error a dead run carries (characters; the rest is cut).
MAX_DEAD_ERROR_CHARS = 1024


#: No envelope fields (a legacy body carries them in its payload).
_NO_FIELDS: Mapping[str, Any] = types.MappingProxyType({})

@dataclasses.dataclass(frozen=True)
class Message:
    """One task invocation: what to run, with what, and its delivery history."""

    task_id: str
    task_name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    app_data: Any = None
    #: Runs retried before this copy (:attr:`attempt` is this run's number),
    #: and failures counted toward ``max_retries``.
    retry_num: int = 0
    failure_num: int = 0
    #: When this copy was sent (epoch seconds; the payload's ``enqueued_at``).
    sent_at: float = 0.0
    publisher: str = ''
    #: Earlier deliveries nobody settled (their worker died), carried over to
    #: its copies. This and the fields below travel in the signed envelope.
    unsettled: int = 0
    #: When the task was first published (epoch seconds; 0: now); copies keep
    #: it, so the replay window (MESSAGE_MAX_AGE_SEC) counts from it.
    published_at: float = 0.0
    #: Context carried with the task, as strings (e.g. a trace context added
    #: by a publish hook); copies keep it.
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: A dead run (see :meth:`dead_run`): the id of the task that failed for
    #: good, and its final error, one line ('' for any other message).
    dead_of: str = ''
    dead_error: str = ''
    #: When a task waiting longer than SQS's 15-minute delay is due (epoch
    #: seconds; 0: no such wait; see :mod:`kale.delays`).
    due_at: float = 0.0

    @property
    def attempt(self) -> int:
        """The number of the run this message asks for: 1 for the first, 2 for
        the first retry (the records' ``attempts`` counts the same runs)."""
        return self.retry_num + 1

    def attributes(self) -> dict[str, Any]:
        """SQS message attributes, so operators see these without decoding."""
        attributes: dict[str, Any] = {
            ATTR_TASK_ID: self.task_id, ATTR_TASK_NAME: self.task_name,
            ATTR_RETRY_NUM: self.retry_num, ATTR_FAILURE_NUM: self.failure_num}
        if self.dead_of:
            attributes[ATTR_DEAD_OF] = self.dead_of
        return attributes

    def next_attempt(self) -> 'Message':
        """The copy to publish for a retry after a failure (counts incremented)."""
        return dataclasses.replace(self, retry_num=self.retry_num + 1,
                                   failure_num=self.failure_num + 1,
                                   sent_at=time.time(), publisher=publisher_identity())

    def dead_run(self, error: str) -> 'Message':
        """The dead run of this task, which failed for good with ``error``: a
        new task with the same arguments, its counts at zero, linked by
        ``dead_of``. Its id derives from this task's id and publish time, so a
        redelivery that fails again makes the same dead run, which runs once."""
        now = time.time()
        seed = '%s@%r' % (self.task_id, self.published_at)
        line = ' '.join(error.split())[:MAX_DEAD_ERROR_CHARS]
        return dataclasses.replace(
            self, task_id=hashlib.sha256(b'kale-dead-run:' + seed.encode()).hexdigest()[:32],
            retry_num=0, failure_num=0, unsettled=0, sent_at=now, published_at=now,
            publisher=publisher_identity(), dead_of=self.task_id, dead_error=line, due_at=0.0)

    def to_payload(self) -> dict[str, Any]:
        """The serialized part (the envelope carries the task id and path again,
        with ``unsettled`` and ``published_at``)."""
        return {'id': self.task_id, 'task': self.task_name, 'args': tuple(self.args),
                'kwargs': dict(self.kwargs), 'app_data': self.app_data,
                'retry_num': self.retry_num, 'failure_num': self.failure_num,
                'enqueued_at': self.sent_at, 'publisher': self.publisher}

    @classmethod
    def from_payload(cls, payload: Any, envelope: Mapping[str, Any] = _NO_FIELDS) -> 'Message':
        """Build from a deserialized payload and the fields its envelope carries
        (``published_at``, ``unsettled``, ``context``, ``dead_of`` and
        ``dead_error``, and the counts, which win over the payload's);
        ValueError says what is wrong."""
        if type(payload) is not dict:
            raise ValueError('payload is a %s, not a mapping' % type(payload).__name__)
        get = payload.get
        task_id, task_name, args, kwargs = get('id'), get('task'), get('args'), get('kwargs')
        retry_num, failure_num = get('retry_num', 0), get('failure_num', 0)
        unsettled, sent_at = get('unsettled', 0), get('enqueued_at', 0.0)
        publisher = get('publisher', '')
        # One test for the usual payload; the field by field search only to
        # say what is wrong with another. The counts are ints by then, and
        # the OR of ints is negative when one of them is.
        if not (type(task_id) is type(task_name) is type(publisher) is str
                and type(args) in _SEQUENCE and type(kwargs) is dict
                and type(retry_num) is type(failure_num) is type(unsettled) is int
                and type(sent_at) in _NUMBER
                and (retry_num | failure_num | unsettled) >= 0
                and (not kwargs or _text_names(kwargs))):
            _refuse(payload)
        fields = {'task_id': task_id, 'task_name': task_name, 'args': tuple(args),  # type: ignore[arg-type]
                  'kwargs': kwargs, 'app_data': get('app_data'), 'retry_num': retry_num,
                  'failure_num': failure_num, 'sent_at': float(sent_at),
                  'publisher': publisher, 'unsettled': unsettled, 'published_at': 0.0,
                  'context': {}, 'dead_of': '', 'dead_error': '', 'due_at': 0.0}
        fields.update(envelope)
        return speed.build(cls, fields)      # every field set and checked (see kale.speed)


def _text_names(kwargs: dict[Any, Any]) -> bool:
    """Whether every keyword argument name is a string."""
    for name in kwargs:
        if type(name) is not str:
            return False
    return True


def _refuse(payload: dict[str, Any]) -> NoReturn:
    """Raise the ValueError that says what is wrong with a payload."""
    get = payload.get
    missing = {'id', 'task', 'args', 'kwargs'} - {key for key in payload if payload[key] is not None}
    if missing:
        raise ValueError('payload lacks %s' % ', '.join(sorted(missing)))
    for key, kinds, default in (('id', _TEXT, None), ('task', _TEXT, None),
                                ('args', _SEQUENCE, None), ('kwargs', _MAPPING, None),
                                ('retry_num', _WHOLE, 0), ('failure_num', _WHOLE, 0),
                                ('unsettled', _WHOLE, 0), ('enqueued_at', _NUMBER, 0.0),
                                ('publisher', _TEXT, '')):
        value = get(key, default)
        if type(value) not in kinds:
            raise ValueError('payload field %r has type %s' % (key, type(value).__name__))
    if not _text_names(payload['kwargs']):
        raise ValueError('payload kwargs have a non-string name')
    raise ValueError('payload has a negative count')


# Exact types a payload field may have (bool is not a whole number here).
_TEXT = (str,)
_SEQUENCE = (list, tuple)
_MAPPING = (dict,)
_WHOLE = (int,)
_NUMBER = (int, float)


def publisher_identity() -> str:
    """Who published: this process's id (``host:pid@start``), the one its
    worker row, log lines and task records carry, so a publish joins them."""
    return process_identity()[0]
