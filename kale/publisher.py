"""Publishing: validate a task invocation, encode it, hand it to the broker.

Every check runs before anything is sent, and each failure has its own
exception naming the task and the bad value: the queue must be configured,
``time_limit`` must be at most 12 hours, ``delay_sec`` must be within 0..365
days (or ``eta`` a timezone-aware datetime, see :mod:`kale.delays`), a FIFO
queue needs a ``group_id`` and takes no delay (a standard one takes a group,
its tenant, only when configured ``fair``, see :mod:`kale.fair`), the
arguments must serialize, and the message must fit ``SQS_TASK_SIZE_LIMIT``.
A batch is checked whole before any of it is sent.

Publish hooks (:class:`kale.hooks.PublishHooks`, from ``PUBLISH_HOOKS`` or
``Publisher(hooks=...)``) see every :class:`Publication` before it is encoded
and after it was sent.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import numbers
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterable,
    Mapping,
    Optional,
    Protocol,
    Sequence,
)

from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec import get_codec
from kale.config import Config, default_config
from kale.delays import check_delay, check_wait  # noqa: F401  (check_delay's home was here)
from kale.exceptions import (
    BatchSendError,
    InvalidDelayError,
    InvalidGroupError,
    InvalidTimeLimitError,
    PublishError,
)
from kale.fair import check_group_id, tenants, valid_group_id, with_tenants
from kale.hooks import HookDispatcher, PublishHooks, load_feature_hooks, load_hooks
from kale.ids import random_id
from kale.labels import check_labels
from kale.message import Message, publisher_identity
from kale.off_loop import off_the_loop
from kale.queue_config import TaskQueue, get_queue_config
from kale.transport import MAX_VISIBILITY_SEC, AttributeValue, OutgoingMessage
from kale.unique import unique_claims

if TYPE_CHECKING:
    from kale.task import Task

logger = logging.getLogger(__name__)


class Sender(Protocol):
    """What the publisher sends through: :class:`kale.broker.Broker`, or the eager runner."""

    def sqs_name(self, queue: TaskQueue) -> str:
        """The queue's full SQS name, which each body is signed for."""

    def send(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send the messages; returns their SQS message ids."""


def check_fifo_ids(task_name: str, queue: TaskQueue, group_id: Any, dedup_id: Any,
                   delay: Any) -> None:
    """A FIFO queue needs a ``group_id`` and takes no delay; a standard queue
    takes no ``dedup_id``, and a ``group_id`` (the tenant) only when it is
    fair. Both are 1..128 characters of letters, digits and punctuation."""
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
    """``time_limit`` must be a positive number of seconds, at most SQS's 12
    hours. (A task longer than its queue's visibility timeout is kept
    invisible by the worker's heartbeat while it runs.)"""
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


def task_queue(task_class: type['Task'], config: Config,
               queue_name: Optional[str] = None) -> TaskQueue:
    """The configured queue the task publishes to (``queue_name``, from
    ``with_options(queue=...)``, else the task's own), with its time limit checked."""
    queue = get_queue_config(config).get_queue(queue_name or task_class.queue,
                                               who='task %s' % task_class.task_path())
    check_time_limit(task_class, queue)
    return queue


def _call_pair(task_name: str, number: int, call: Any) -> tuple[tuple, dict]:
    if not (isinstance(call, (tuple, list)) and len(call) == 2
            and isinstance(call[0], (tuple, list)) and isinstance(call[1], Mapping)):
        raise PublishError('task %s: publish_batch call #%d must be an (args, kwargs) pair, got %r'
                           % (task_name, number, call))
    return tuple(call[0]), dict(call[1])


@dataclasses.dataclass
class Publication:
    """One ``publish`` or ``publish_batch`` call, as publish hooks see it."""

    task_class: type['Task']
    queue: TaskQueue
    messages: list[Message]
    delay_sec: int
    #: Extra SQS attributes for each message (hooks may add to them).
    attributes: list[dict[str, AttributeValue]]
    #: Set for ``after_publish`` when encoding or sending failed.
    error: Optional[BaseException] = None
    #: The queue's full SQS name (with QUEUE_PREFIX).
    sqs_name: str = ''
    #: Context to carry with each message, one dict of strings per message
    #: (hooks may add to them, e.g. a W3C trace context): it travels in the
    #: signed envelope, and the worker sees it as ``message.context``.
    context: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: The SQS message ids, in order, once sent (for ``after_publish``).
    message_ids: list[str] = dataclasses.field(default_factory=list)
    #: The message group, on a FIFO queue (the tenant given, on a fair queue).
    group_id: str = ''
    #: Each message's labels (from ``publish(..., labels=...)`` and the task's
    #: ``labels()``), for the records; they do not travel in the message.
    labels: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: Encoded for a later send (the outbox keeps it in the caller's
    #: transaction): ``after_publish`` sees no message ids, and the records
    #: are written by whatever sends it.
    deferred: bool = False
    #: When the tasks are due (epoch seconds), for a wait longer than SQS's
    #: 15-minute delay (``delay_sec`` is then 900; see :mod:`kale.delays`).
    due_at: Optional[float] = None

    @property
    def task_ids(self) -> list[str]:
        return [m.task_id for m in self.messages]


class Publisher:
    """Builds, checks and sends task messages, calling the publish hooks.

    ``config`` (an :class:`~kale.app.App`'s) gives the queues, codec, broker and
    hooks; without it, the default app's at each publish (the publisher
    ``MyTask.publish`` uses, see :func:`get_publisher`)."""

    def __init__(self, sender: Optional[Sender] = None, hooks: Sequence[Any] = (),
                 config: Optional[Config] = None, clock: Clock = SYSTEM_CLOCK):
        self._sender = sender
        self.clock = clock          # what delays and ETAs count from
        self._extra_hooks = list(hooks)
        self._config = config
        self._hooks: Optional[tuple[Config, HookDispatcher]] = None

    @property
    def config(self) -> Config:
        """The configuration this publisher publishes with."""
        return self._config or default_config()

    def queue_of(self, task_class: type['Task'], queue_name: Optional[str] = None) -> TaskQueue:
        """The queue ``task_class`` publishes to (from the queue config):
        ``queue_name`` when given, else the task's own."""
        return task_queue(task_class, self.config, queue_name)

    @property
    def sender(self) -> Sender:
        if self._sender is None:
            from kale.broker import get_broker
            return get_broker(self.config)
        return self._sender

    @property
    def hooks(self) -> HookDispatcher:
        """The publish hooks: those of features turned on (records, metrics,
        tracing), then ``PUBLISH_HOOKS``, then those given to the constructor;
        loaded once per configuration."""
        config = self.config
        if self._hooks is None or self._hooks[0] is not config:
            loaded = [hook for hook in load_feature_hooks(config)
                      if isinstance(hook, PublishHooks)] + load_hooks(
                list(config.PUBLISH_HOOKS or ()) + self._extra_hooks, PublishHooks,
                'PUBLISH_HOOKS')
            self._hooks = (config, HookDispatcher(loaded))
        return self._hooks[1]

    @staticmethod
    def labels(task_class: type['Task'], given: dict[str, str], args: tuple,
               kwargs: Mapping[str, Any]) -> dict[str, str]:
        """One message's labels: the task's ``labels()`` under those given."""
        own = task_class.labels(*args, **kwargs)
        if not own:
            return given
        merged = check_labels(task_class.task_path(), own, 'labels()')
        merged.update(given)
        return merged

    def build(self, task_class: type['Task'], app_data: Any, args: tuple,
              kwargs: Mapping[str, Any]) -> Message:
        """A new message for one invocation (its arguments checked)."""
        check_arguments(task_class, args, kwargs, self.config)
        task_class.check_call(args, kwargs)
        return Message(task_id=task_class.make_task_id(*args, **kwargs),
                       task_name=task_class.task_path(), args=tuple(args), kwargs=dict(kwargs),
                       app_data=app_data, sent_at=time.time(),
                       publisher=publisher_identity())

    def _claim_unique(self, name: str, claims: list[tuple[str, str]],
                      for_sec: float) -> list[str]:
        """The holder of each unique key, decided by a hook (the task records')."""
        for answer in self.hooks.collect(PublishHooks.claim_unique, claims, for_sec):
            if answer is not None:
                return list(answer)
        raise PublishError('task %s: unique_for_sec is decided in the task records: set '
                           'RECORDS_URL' % name)

    def publish(self, task_class: type['Task'], app_data: Any, args: tuple,
                kwargs: Mapping[str, Any], delay_sec: Any = 0, group_id: Optional[str] = None,
                dedup_id: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None,
                queue_name: Optional[str] = None,
                unique_for_sec: Optional[float] = None, eta: Any = None) -> str:
        """Publish one invocation; returns its task id."""
        return self.publish_batch(task_class, app_data, [(args, kwargs)], delay_sec,
                                  group_id, dedup_id, labels, queue_name,
                                  unique_for_sec=unique_for_sec, eta=eta)[0]

    def publish_batch(self, task_class: type['Task'], app_data: Any, calls: Iterable[Any],
                      delay_sec: Any = 0, group_id: Optional[str] = None,
                      dedup_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      queue_name: Optional[str] = None,
                      task_ids: Optional[Sequence[str]] = None,
                      context: Optional[Mapping[str, str]] = None,
                      deferred: Optional[Callable[[Publication, list[OutgoingMessage]], None]]
                      = None, unique_for_sec: Optional[float] = None,
                      eta: Any = None) -> list[str]:
        """Publish many invocations of one task; returns their task ids in order.
        On a FIFO queue they join ``group_id`` in this order, each deduplicated
        by its task id (or by ``dedup_id``, for a single invocation).
        ``queue_name`` names another configured queue than the task's own;
        ``task_ids`` (one per call) are ids given beforehand (a workflow's
        nodes), and ``context`` travels in every message. With ``deferred``,
        nothing is sent: the encoded messages are handed to it (the outbox).
        ``delay_sec`` (up to 365 days) or ``eta`` delays the first run (see
        :mod:`kale.delays` for waits over SQS's 15 minutes)."""
        name = task_class.task_path()
        delay, due_at = check_wait(name, delay_sec, eta, self.clock.time())
        given = check_labels(name, labels)
        queue = self.queue_of(task_class, queue_name)
        check_fifo_ids(name, queue, group_id, dedup_id,
                       delay and (delay_sec if eta is None else eta))
        pairs = [_call_pair(name, number, call) for number, call in enumerate(calls)]
        messages = [self.build(task_class, app_data, args, kwargs) for args, kwargs in pairs]
        if not messages:
            return []
        if task_ids is not None:
            messages = [dataclasses.replace(m, task_id=task_id)
                        for m, task_id in zip(messages, task_ids, strict=True)]
        if due_at is not None:          # signed in the envelope (kale.delays)
            messages = [dataclasses.replace(m, due_at=due_at) for m in messages]
        groups = tenants(task_class, group_id, messages) if queue.fair else []
        unique_sec = unique_for_sec if unique_for_sec is not None else \
            getattr(task_class, 'unique_for_sec', None)
        holders: Optional[list[str]] = None
        claims = unique_claims(self.config, name, unique_sec, pairs, messages) \
            if deferred is None else None
        if claims:
            holders = self._claim_unique(name, claims, float(unique_sec or 0))
            kept = [number for number, (m, holder) in enumerate(zip(messages, holders,
                                                                      strict=True))
                    if holder == m.task_id]
            messages = [messages[number] for number in kept]
            pairs = [pairs[number] for number in kept]
            groups = [groups[number] for number in kept] if groups else groups
            if not messages:            # each is a task already waiting or running
                return holders
        if dedup_id is not None and len(messages) > 1:
            raise InvalidGroupError('task %s: dedup_id is for one task; publish_batch '
                                    'deduplicates each task by its task id' % name)
        dedup_ids = [dedup_id or m.task_id for m in messages] if queue.fifo else []
        for task_dedup_id in dedup_ids:
            if not valid_group_id(task_dedup_id):
                raise InvalidGroupError('task %s: its task id %r cannot be a deduplication id '
                                        '(1-128 letters, digits or punctuation); pass dedup_id='
                                        % (name, task_dedup_id))
        sender = self.sender
        sqs_name = sender.sqs_name(queue)
        publication = Publication(task_class, queue, messages, delay, [{} for _ in messages],
                                  group_id=group_id or '',
                                  labels=[self.labels(task_class, given, args, kwargs)
                                          for args, kwargs in pairs],
                                  sqs_name=sqs_name,
                                  context=[dict(context or {}) for _ in messages],
                                  deferred=deferred is not None, due_at=due_at)
        hooks = self.hooks
        hooks(PublishHooks.before_publish, publication)
        # Encoding is inside the try: a hook that opened something in
        # before_publish (a trace span) always sees after_publish.
        try:
            codec = get_codec(self.config)
            outgoing = [codec.to_outgoing(with_context(m, carried), sqs_name, delay, extra)
                        for m, extra, carried in zip(messages, publication.attributes,
                                                     publication.context, strict=True)]
            if queue.fifo:
                outgoing = [dataclasses.replace(out, group_id=publication.group_id, dedup_id=did)
                            for out, did in zip(outgoing, dedup_ids, strict=True)]
            elif groups:        # a fair queue: each task's tenant
                outgoing = with_tenants(outgoing, groups)
            if deferred is not None:
                deferred(publication, outgoing)       # kept for a later send, no network I/O
            else:
                publication.message_ids = sender.send(queue, outgoing)
        except Exception as exc:
            if isinstance(exc, BatchSendError):
                exc.task_ids = publication.task_ids  # type: ignore[attr-defined]
            publication.error = exc
            hooks(PublishHooks.after_publish, publication)
            if claims:                  # not sent: the keys must not hold them
                unsent = set(publication.task_ids)
                hooks(PublishHooks.release_unique,
                      [(key, task_id) for key, task_id in claims if task_id in unsent])
            raise
        hooks(PublishHooks.after_publish, publication)
        for m in messages:
            logger.debug('published task %s (%s) to queue %s', m.task_id, name, queue.name)
        return holders if holders is not None else publication.task_ids


    async def apublish(self, task_class: type['Task'], app_data: Any, args: tuple,
                       kwargs: Mapping[str, Any], delay_sec: Any = 0,
                       group_id: Optional[str] = None, dedup_id: Optional[str] = None,
                       labels: Optional[Mapping[str, str]] = None,
                       queue_name: Optional[str] = None, eta: Any = None) -> str:
        """:meth:`publish` from a coroutine: sent on a thread (see
        :func:`off_the_loop`), the caller's event loop never blocked."""
        return await off_the_loop(functools.partial(
            self.publish, task_class, app_data, args, kwargs, delay_sec, group_id, dedup_id,
            labels, queue_name, eta=eta))

    async def apublish_batch(self, task_class: type['Task'], app_data: Any,
                             calls: Iterable[Any], delay_sec: Any = 0,
                             group_id: Optional[str] = None,
                             labels: Optional[Mapping[str, str]] = None,
                             queue_name: Optional[str] = None, eta: Any = None) -> list[str]:
        """:meth:`publish_batch` from a coroutine (see :meth:`apublish`)."""
        calls = list(calls)
        return await off_the_loop(functools.partial(
            self.publish_batch, task_class, app_data, calls, delay_sec, group_id, None, labels,
            queue_name, eta=eta))


def with_context(message: Message, context: Mapping[str, str]) -> Message:
    """``message`` carrying ``context`` besides its own (hooks filled it)."""
    if not context:
        return message
    return dataclasses.replace(message, context={**message.context, **context})


_default: Optional[Publisher] = None


def get_publisher() -> Publisher:
    """The publisher ``Task.publish`` uses: the one :func:`set_publisher` put in
    place (eager mode, tests), else the settings' (the default app's)."""
    if _default is not None:
        return _default
    config = default_config()
    return config.part('publisher', lambda: Publisher(config=config))


def set_publisher(publisher: Optional[Publisher]) -> Optional[Publisher]:
    """Replace the publisher ``Task.publish`` uses (eager mode); returns the
    one it replaces (None: the default app's)."""
    global _default
    previous, _default = _default, publisher
    return previous


def new_task_id() -> str:
    return random_id()
