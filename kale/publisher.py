"""Publishing: check a task invocation whole, encode it, hand it to the broker,
between the publish hooks (docs/explanation/internals-top.md, "Publishing")."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import functools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar

from kale.clock import SYSTEM_CLOCK, Clock
from kale.delays import check_wait
from kale.exceptions import BatchSendError, PublishError
from kale.hooks import HookDispatcher, PublishHooks, load_hooks
from kale.message import Message, publisher_identity
from kale.publication import Draft, Publication, PublishCall, Sender
from kale.publish_checks import (
    call_pair,
    check_arguments,
    check_fifo_ids,
    check_labels,
    dedup_ids,
    task_queue,
    tenants,
    unique_claims,
    unique_window,
    with_tenants,
)
from kale.queue_config import TaskQueue
from kale.transport import OutgoingMessage

if TYPE_CHECKING:
    from kale.app import App
    from kale.task import Task

logger = logging.getLogger(__name__)

T = TypeVar('T')

#: Threads that send the publishes of coroutines (apublish): boto3 blocks.
#: An asyncio SQS client (aiobotocore) sends single messages about twice as
#: fast, but pins botocore to one release (see bench/README.md, apublish).
ASYNC_PUBLISH_THREADS = 16
_async_threads: Optional[concurrent.futures.ThreadPoolExecutor] = None
_async_threads_lock = threading.Lock()


def _forget_async_threads() -> None:
    global _async_threads
    _async_threads = None


os.register_at_fork(after_in_child=_forget_async_threads)


async def off_the_loop(call: Callable[[], T]) -> T:
    """``call()`` on one of the publishing threads, awaited: the running event
    loop goes on meanwhile. The caller's context (a trace, a settings
    override) goes along."""
    global _async_threads
    if _async_threads is None:
        with _async_threads_lock:
            if _async_threads is None:
                _async_threads = concurrent.futures.ThreadPoolExecutor(
                    ASYNC_PUBLISH_THREADS, thread_name_prefix='kale-apublish')
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_async_threads, context.run, call)


class Publisher:
    """Builds, checks and sends task messages, in stages (:meth:`draft`,
    :meth:`claim`, :meth:`send`) between the publish hooks, once an app gave it
    its parts (:meth:`given_parts`; the default app does for one put in place
    with :func:`set_publisher`)."""

    def __init__(self, sender: Optional[Sender] = None, hooks: Sequence[Any] = (),
                 clock: Clock = SYSTEM_CLOCK):
        self._sender = sender
        self.clock = clock          # what delays and ETAs count from
        self._extra_hooks = list(hooks)
        self._app: Optional['App'] = None
        self._hooks: Optional[HookDispatcher] = None

    def given_parts(self, app: 'App') -> 'Publisher':
        """A copy of this publisher with ``app``'s parts: its configuration,
        queues, codec and features' hooks."""
        made = copy.copy(self)
        made._app = app
        made._sender = self._sender if self._sender is not None else app.broker
        made._hooks = HookDispatcher(
            [hook for hook in app.feature_hooks() if isinstance(hook, PublishHooks)]
            + load_hooks(list(app.config.PUBLISH_HOOKS or ()) + self._extra_hooks,
                         PublishHooks, 'PUBLISH_HOOKS'))
        return made

    @property
    def has_app(self) -> bool:
        """Whether an app gave it its parts (see :meth:`given_parts`)."""
        return self._app is not None

    _NO_APP = ('this publisher was made without an app: publish with app.publisher, or put it '
               'in place with kale.publisher.set_publisher')

    @property
    def app(self) -> 'App':
        """The app that gave it its parts (TypeError when none did)."""
        if self._app is None:
            raise TypeError(self._NO_APP)
        return self._app

    @property
    def hooks(self) -> HookDispatcher:
        """The publish hooks: its app's features', ``PUBLISH_HOOKS``, those given."""
        if self._hooks is None:
            raise TypeError(self._NO_APP)
        return self._hooks

    def queue_of(self, task_class: type['Task'], queue_name: Optional[str] = None) -> TaskQueue:
        """The configured queue ``task_class`` publishes to (``queue_name``, else its own)."""
        return task_queue(task_class, self.app.queues, queue_name)

    @property
    def sender(self) -> Sender:
        """What sends its messages: its app's broker, or the one it was made with."""
        return self.app.broker if self._sender is None else self._sender

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
        check_arguments(task_class, args, kwargs, self.app.config)
        task_class.check_call(args, kwargs)
        return Message(task_id=task_class.make_task_id(*args, **kwargs),
                       task_name=task_class.task_path(), args=tuple(args), kwargs=dict(kwargs),
                       app_data=app_data, sent_at=time.time(),
                       publisher=publisher_identity())

    # --- the calls ---------------------------------------------------------------------

    def publish(self, task_class: type['Task'], app_data: Any, args: tuple,
                kwargs: Mapping[str, Any], delay_sec: Any = 0, group_id: Optional[str] = None,
                dedup_id: Optional[str] = None,
                labels: Optional[Mapping[str, str]] = None,
                queue_name: Optional[str] = None,
                unique_for_sec: Optional[float] = None, eta: Any = None) -> str:
        """Publish one invocation; returns its task id."""
        return self.run(PublishCall(task_class, app_data, [(args, kwargs)], delay_sec, group_id,
                                    dedup_id, labels, queue_name,
                                    unique_for_sec=unique_for_sec, eta=eta))[0]

    def publish_batch(self, task_class: type['Task'], app_data: Any, calls: Iterable[Any],
                      delay_sec: Any = 0, group_id: Optional[str] = None,
                      dedup_id: Optional[str] = None,
                      labels: Optional[Mapping[str, str]] = None,
                      queue_name: Optional[str] = None,
                      task_ids: Optional[Sequence[str]] = None,
                      context: Optional[Mapping[str, str]] = None,
                      unique_for_sec: Optional[float] = None, eta: Any = None,
                      sender: Optional[Any] = None,
                      retry_nums: Optional[Sequence[int]] = None) -> list[str]:
        """Publish many invocations of one task; returns their task ids in order.
        On a FIFO queue they join ``group_id`` in order, each deduplicated by
        its task id (or ``dedup_id``, for one). ``queue_name``: another
        configured queue; ``task_ids`` (one per call): ids given beforehand;
        ``context`` travels in every message; ``sender`` replaces this
        publisher's (a :class:`KeepingSender` keeps the messages: the outbox);
        ``retry_nums`` (one per call): the runs each task had before."""
        return self.run(PublishCall(task_class, app_data, list(calls), delay_sec, group_id,
                                    dedup_id, labels, queue_name, task_ids, context,
                                    unique_for_sec, eta, retry_nums), sender)

    async def apublish(self, *call: Any, **options: Any) -> str:
        """:meth:`publish` from a coroutine: sent on a thread (see
        :func:`off_the_loop`), the caller's event loop never blocked."""
        return await off_the_loop(functools.partial(self.publish, *call, **options))

    async def apublish_batch(self, *call: Any, **options: Any) -> list[str]:
        """:meth:`publish_batch` from a coroutine (see :meth:`apublish`)."""
        return await off_the_loop(functools.partial(self.publish_batch, *call, **options))

    # --- the pipeline ------------------------------------------------------------------

    def run(self, call: PublishCall, sender: Optional[Any] = None) -> list[str]:
        """The stages in order; the task ids (a unique task's holder for a key held)."""
        draft = self.draft(call)
        if not draft.messages:
            return []
        sender = sender if sender is not None else self.sender
        # A KeepingSender keeps, and decides unique tasks when it sends (asked
        # by attribute: a runtime Protocol check costs more than a publish).
        keeps = callable(getattr(sender, 'keep', None))
        holders, claims = self.claim(call, draft, keeps)
        if holders is not None and not draft.messages:
            return holders          # each is a task already waiting or running
        publication = self.send(call, draft, sender, keeps, claims)
        return holders if holders is not None else publication.task_ids

    def draft(self, call: PublishCall) -> Draft:
        """The first stage: every check that needs no encoding, and the messages."""
        name = call.task_class.task_path()
        delay, due_at = check_wait(name, call.delay_sec, call.eta, self.clock.time())
        given = check_labels(name, call.labels)
        queue = self.queue_of(call.task_class, call.queue_name)
        check_fifo_ids(name, queue, call.group_id, call.dedup_id,
                       delay and (call.delay_sec if call.eta is None else call.eta))
        pairs = [call_pair(name, number, one) for number, one in enumerate(call.calls)]
        messages = self._messages(call, pairs, due_at)
        groups = tenants(call.task_class, call.group_id, messages) \
            if queue.fair and messages else []
        return Draft(name, queue, delay, due_at, given, pairs, messages, groups)

    def _messages(self, call: PublishCall, pairs: list[tuple[tuple, dict]],
                  due_at: Optional[float]) -> list[Message]:
        """A message per call, with the ids, run counts and due time given."""
        messages = [self.build(call.task_class, call.app_data, args, kwargs)
                    for args, kwargs in pairs]
        if messages and call.task_ids is not None:
            messages = [dataclasses.replace(m, task_id=task_id)
                        for m, task_id in zip(messages, call.task_ids, strict=True)]
        if messages and call.retry_nums is not None:
            messages = [dataclasses.replace(m, retry_num=count)
                        for m, count in zip(messages, call.retry_nums, strict=True)]
        if due_at is not None:
            messages = [dataclasses.replace(m, due_at=due_at) for m in messages]
        return messages

    def claim(self, call: PublishCall, draft: Draft, keeps: bool
              ) -> tuple[Optional[list[str]], Optional[list[tuple[str, str]]]]:
        """The holder of each unique task's key, the draft thinned to the tasks
        that hold their own; (None, None) when not unique or the sender decides."""
        if keeps:
            return None, None
        unique_sec = unique_window(draft.name, call.unique_for_sec,
                                   getattr(call.task_class, 'unique_for_sec', None))
        claims = unique_claims(self.app.config, draft.name, unique_sec, draft.pairs,
                               draft.messages)
        if not claims:
            return None, None
        holders = self._holders(draft.name, claims, float(unique_sec or 0))
        draft.keep_only([number for number, (m, holder) in enumerate(
            zip(draft.messages, holders, strict=True)) if holder == m.task_id])
        return holders, claims

    def _holders(self, name: str, claims: list[tuple[str, str]], for_sec: float) -> list[str]:
        """The holder of each unique key, decided by a hook (the task records')."""
        for answer in self.hooks.collect(PublishHooks.claim_unique, claims, for_sec):
            if answer is not None:
                return list(answer)
        raise PublishError('task %s: unique_for_sec is decided in the task records: set '
                           'RECORDS_URL' % name)

    def send(self, call: PublishCall, draft: Draft, sender: Any, keeps: bool,
             claims: Optional[list[tuple[str, str]]]) -> Publication:
        """Encode and send (or keep) between the hooks; a failure is seen by
        ``after_publish`` and frees the unique keys of what was not sent."""
        ids = dedup_ids(draft.name, draft.queue, draft.messages, call.dedup_id)
        publication = self.publication(call, draft, sender.sqs_name(draft.queue), keeps)
        hooks = self.hooks
        hooks(PublishHooks.before_publish, publication)
        # Encoding is inside the try: a hook that opened something in
        # before_publish (a trace span) always sees after_publish.
        try:
            outgoing = self.encode(publication, draft, ids)
            if keeps:
                sender.keep(publication, outgoing)      # kept for a later send, no network I/O
            else:
                publication.message_ids = sender.send(draft.queue, outgoing)
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
        if logger.isEnabledFor(logging.DEBUG):
            for m in draft.messages:
                logger.debug('published task %s (%s) to queue %s', m.task_id, draft.name,
                             draft.queue.name)
        return publication

    def publication(self, call: PublishCall, draft: Draft, sqs_name: str,
                    keeps: bool) -> Publication:
        """What the publish hooks see of the call."""
        count = len(draft.messages)
        return Publication(call.task_class, draft.queue, draft.messages, draft.delay,
                           [{} for _ in range(count)], group_id=call.group_id or '',
                           labels=[self.labels(call.task_class, draft.labels, args, kwargs)
                                   for args, kwargs in draft.pairs],
                           sqs_name=sqs_name,
                           context=[dict(call.context or {}) for _ in range(count)],
                           deferred=keeps, due_at=draft.due_at)

    def encode(self, publication: Publication, draft: Draft,
               ids: list[str]) -> list[OutgoingMessage]:
        """The signed bodies (with the hooks' context and attributes), grouped."""
        codec = self.app.codec
        outgoing = [codec.to_outgoing(with_context(m, carried), publication.sqs_name,
                                      draft.delay, extra)
                    for m, extra, carried in zip(draft.messages, publication.attributes,
                                                 publication.context, strict=True)]
        if draft.queue.fifo:
            return [dataclasses.replace(out, group_id=publication.group_id, dedup_id=did)
                    for out, did in zip(outgoing, ids, strict=True)]
        if draft.groups:        # a fair queue: each task's tenant
            return with_tenants(outgoing, draft.groups)
        return outgoing


def with_context(message: Message, context: Mapping[str, str]) -> Message:
    """``message`` carrying ``context`` besides its own (hooks filled it)."""
    if not context:
        return message
    return dataclasses.replace(message, context={**message.context, **context})


#: The publisher the default app publishes with, when one was put in place.
_replaced: Optional[Publisher] = None


def replaced_publisher() -> Optional[Publisher]:
    """The publisher :func:`set_publisher` put in place, if any."""
    return _replaced


def set_publisher(publisher: Optional[Publisher]) -> Optional[Publisher]:
    """Replace the default app's publisher, which ``Task.publish`` uses (eager
    mode, tests); returns the one it replaces (None: the default app's own)."""
    global _replaced
    previous, _replaced = _replaced, publisher
    return previous
