"""Running one received message and deciding its fate.

:class:`TaskRunner` is the seam that decides *how* a task runs: verify the
body's envelope when the batch arrives (:meth:`TaskRunner.open`), decode its
payload just before the run (:meth:`TaskRunner.read`), run the task under its
time limit, and turn what happened into a
:class:`~kale.worker.batch.Settlement` (succeeded, skipped, retry with its
copy, dead letter with its copy and reason, or release). It sends nothing;
the consumer settles.

A payload kept in S3 is fetched by :meth:`TaskRunner.read`; when S3 cannot
be reached (or refuses the request) the message is released for
``PAYLOAD_RETRY_DELAY_SEC``, not dead-lettered: the payload is not at fault.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import math
from typing import Any, Awaitable, Callable, Mapping, Optional, Union

from kale.app import App, default_app
from kale.clock import Clock
from kale.codec import Codec
from kale.codec.pipeline import (
    CONTEXT,
    DUE_AT,
    TASK_ID,
    TASK_NAME,
    UNSETTLED,
    Frame,
    parse_context,
)
from kale.config import Config
from kale.events import Outcome, Settlement
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    KaleError,
    PayloadStoreError,
    Retry,
    TimeLimitExceeded,
    describe,
)
from kale.internal import is_internal, proven
from kale.message import ATTR_DEAD_LETTER_REASON, ATTR_SOURCE_QUEUE, Message
from kale.registry import Registry
from kale.retry import child_stand_in, without_message
from kale.settings_check import TASK_ISOLATION_MODES
from kale.task import SKIPPED, Task
from kale.timeout import AsyncLimit, BaseTimeout, Guard, SignalTimeout, TimeoutGuard, failure_of
from kale.topics.names import TOPIC_PREFIX, copy_task_id
from kale.transport import MAX_DELAY_SEC, MAX_VISIBILITY_SEC, OutgoingMessage, ReceivedMessage
from kale.worker.aio import TaskLoop
from kale.worker.batch import Batch, Opened
from kale.worker.isolation import run_in_child
from kale.worker.limits import TaskStuck
from kale.worker.refusals import (
    MAX_REASON_CHARS,
    payload_not_fetched,
    refused,
    verbatim_dead_letter,
)
from kale.worker.signals import WorkerInterrupt

logger = logging.getLogger(__name__)

#: What a FIFO retry's hold leaves of SQS's 12 hours from the message's receipt.
FIFO_HOLD_MARGIN_SEC = 60

class TaskRunner:
    """Decodes and runs received messages, one at a time, in this process."""

    def __init__(self, guard: Union[Guard, type[BaseTimeout]] = SignalTimeout,
                 clock: Optional[Clock] = None, isolation: str = 'none',
                 app: Optional[App] = None, config: Optional[Config] = None):
        if isolation not in TASK_ISOLATION_MODES:
            raise ImproperlyConfigured('TASK_ISOLATION must be one of %s, got %r'
                                       % (', '.join(map(repr, TASK_ISOLATION_MODES)), isolation))
        #: Holds each run to its time limit (a BaseTimeout class is made one).
        self.guard: Guard = (TimeoutGuard(guard, passes_through=(WorkerInterrupt,))
                             if isinstance(guard, type) else guard)
        #: The app whose tasks it runs (its codec, registry and settings; the
        #: default app when none is given), or one with ``config`` for settings.
        self.app: App = app if app is not None else (
            App(config) if config is not None else default_app())
        self.clock: Clock = clock or self.app.clock
        self.codec: Codec = self.app.codec
        self.registry: Registry = self.app.registry
        self.config: Config = self.app.config
        self.isolation = isolation
        self._loop: Optional[TaskLoop] = None
        self._limits: set[AsyncLimit] = set()

    def open_batch(self, batch: Batch) -> None:
        """:meth:`open` every message of the batch into ``batch.opened``, noting what
        later steps ask (so that those a batch does not need cost it nothing);
        the others are settled for the dead-letter queue."""
        codec, registry = self.codec, self.registry
        topics = registry.topics_of(batch.queue.name)
        opened_by_id, task_ids, classes = batch.opened, batch.task_ids, batch.task_classes
        for received in batch.messages:
            opened = self.open(batch, received, topics, codec, registry)
            if isinstance(opened, Settlement):
                batch.settlements.append(opened)
                continue
            opened_by_id[received.message_id] = opened
            classes.add(opened.task_class)
            if received.receive_count > 1:
                batch.may_hold_suspect = True
            if opened.message is None:
                headers = opened.envelope.headers
                task_ids.append(headers.get(TASK_ID, ''))
                if DUE_AT in headers:
                    batch.has_due = True
                if UNSETTLED in headers and headers[UNSETTLED] != '0':
                    batch.may_hold_suspect = True
            else:                       # a legacy body: its payload names it
                task_ids.append(opened.message.task_id)
                batch.may_hold_suspect = True

    def open(self, batch: Batch, received: ReceivedMessage,
             topics: Optional[frozenset[str]] = None, codec: Optional[Codec] = None,
             registry: Optional[Registry] = None) -> Union[Opened, Settlement]:
        """Verify the envelope (signature, replay window, queue, serializer) and
        find the task class, without decoding the payload; or a dead-letter
        settlement saying why not. ``topics``: those the batch's queue
        subscribes to (asked of the registry when not given)."""
        codec, registry = codec or self.codec, registry or self.registry
        envelope = None
        if topics is None:
            topics = registry.topics_of(batch.queue.name)
        try:
            envelope = codec.open(received.body, batch.sqs_name, topics=topics)
            if envelope.legacy:         # its task is named in the payload only
                message = codec.read(envelope)
                return Opened(envelope, self._accepted(registry.resolve(message.task_name),
                                                       message.context), message)
            name = envelope.headers.get(TASK_NAME, '')
            if name.startswith(TOPIC_PREFIX):     # this queue's copy of an event
                task_class = registry.subscriber(name, batch.queue.name)
                return Opened(envelope.for_subscriber(
                    copy_task_id(envelope.task_id, task_class.task_path()),
                    task_class.task_path()), task_class)
            task_class = registry.resolve(name)
            if task_class.kale_internal:
                self._accepted(task_class, parse_context(envelope.headers.get(CONTEXT, '')))
            return Opened(envelope, task_class)
        except DecodeError as exc:
            return refused(batch, received, exc, envelope)

    def _accepted(self, task_class: type[Task], context: Mapping[str, str]) -> type[Task]:
        """``task_class``, unless it is one of Kale's own tasks and the
        message lacks the proof that Kale's own path made it (kale.internal)."""
        if is_internal(task_class) and not proven(self.config, task_class.task_path(), context):
            raise DecodeError(DecodeError.UNKNOWN_TASK, '%s is one of Kale\'s own tasks, and '
                              'this message was not published by Kale' % task_class.task_path())
        return task_class

    def read(self, batch: Batch, received: ReceivedMessage,
             opened: Opened) -> Union[Message, Settlement]:
        """The opened message's payload, decoded just before it runs, or a
        dead-letter settlement when it is corrupt."""
        try:
            message = opened.message or self.codec.read(opened.envelope)
        except DecodeError as exc:
            return refused(batch, received, exc, opened.envelope)
        except PayloadStoreError as exc:
            return payload_not_fetched(batch, received, opened.envelope, exc, self.codec)
        if batch.fifo:          # retries keep the message: its receives count them
            earlier = received.receive_count - 1
            message = dataclasses.replace(message, retry_num=earlier, failure_num=earlier)
        return message

    def run(self, batch: Batch, received: ReceivedMessage, message: Message,
            task_class: type[Task], envelope: Optional[Frame] = None) -> Settlement:
        """Run the task under its time limit and decide what settling does (the
        settlement keeps the ``envelope``: its copies reseal it). A coroutine task runs
        on the worker's event loop meanwhile (:meth:`arun`: one started there)."""
        started = self.clock.monotonic()
        task: Any = None
        try:
            task = task_class(message)
            task.app = self.app
            if self.isolation == 'process':
                result = run_in_child(
                    lambda: _run_anywhere(task, message), task_class.time_limit,
                    lambda exc: child_stand_in(exc, task_class.is_retriable))
            elif task_class.is_coroutine:
                result = self._wait_for_coroutine(task, message, task_class.time_limit)
            else:
                result = self.guard.run(task.run, task_class.time_limit, *message.args,
                                        **message.kwargs)
        except WorkerInterrupt:
            return self._stopped(received, message, envelope, started)
        except TaskStuck:
            raise
        except BaseException as exc:  # a task's failure, whatever it raised
            return self.failed(batch, received, message, task_class, task, exc,
                               self.clock.monotonic() - started, envelope)
        duration = self.clock.monotonic() - started
        if result is SKIPPED:
            return Settlement(received, Outcome.SKIPPED, message=message, task=task,
                              reason='should_run_task declined', duration_sec=duration,
                              envelope=envelope)
        target = task_class.target_runtime
        if target and duration > target and self._over_target(task_class, message, duration):
            self._wait_for_hook(task.on_target_runtime_exceeded, duration)
        return Settlement(received, Outcome.SUCCEEDED, message=message, task=task,
                          duration_sec=duration, result=result, envelope=envelope)

    async def arun(self, batch: Batch, received: ReceivedMessage, message: Message,
                   task_class: type[Task], envelope: Optional[Frame] = None) -> Settlement:
        """:meth:`run` for a coroutine task, on the worker's event loop: held
        to its time limit by :class:`~kale.timeout.AsyncLimit` (cancelled at
        the limit), and stopped by :meth:`stop_coroutines`."""
        started = self.clock.monotonic()
        task: Any = None
        error: Optional[BaseException] = None
        result: Any = None
        try:
            task = task_class(message)
            task.app = self.app
            with AsyncLimit(task_class.time_limit, WorkerInterrupt) as limit:
                self._limits.add(limit)
                try:
                    result = await task.arun(*message.args, **message.kwargs)
                except BaseException as exc:    # a task's failure, whatever it raised
                    error = failure_of(exc)
                finally:
                    self._limits.discard(limit)
            if error is None and limit.fired:   # it swallowed the cancellation and ended
                error = TimeLimitExceeded(task_class.time_limit)
        except BaseException as exc:            # the task could not even be made
            error = exc
        if isinstance(error, WorkerInterrupt):
            return self._stopped(received, message, envelope, started)
        duration = self.clock.monotonic() - started
        if error is not None:
            return self.failed(batch, received, message, task_class, task, error, duration,
                               envelope)
        if self._over_target(task_class, message, duration):
            try:
                await _awaited(task.on_target_runtime_exceeded(duration))
            except Exception:
                logger.exception('task hook on_target_runtime_exceeded failed')
        return self._ended(received, message, task, result, duration, envelope)

    def stop_coroutines(self) -> None:
        """Stop every coroutine task running now (a second shutdown signal):
        each ends as released, like a task a signal interrupted."""
        if self._loop is not None:
            for limit in list(self._limits):
                self._loop.call(limit.stop)

    @property
    def stuck_grace_sec(self) -> float:
        """Seconds a task may run past its time limit before the worker
        counts it stuck (WORKER_STUCK_GRACE_SEC)."""
        return float(self.config.WORKER_STUCK_GRACE_SEC)

    def await_hook(self, awaitable: Awaitable[Any]) -> Any:
        """A coroutine hook's awaitable, run to its end on the worker's loop."""
        return self.loop.run_hook(awaitable, self.stuck_grace_sec)

    @property
    def loop(self) -> TaskLoop:
        """The worker's event loop (started on first use)."""
        if self._loop is None:
            self._loop = TaskLoop()
        return self._loop

    def close(self) -> None:
        """Stop the event loop, if one was started."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _wait_for_coroutine(self, task: Task, message: Message, seconds: float) -> Any:
        """Run a coroutine task on the worker's loop and wait for it (the
        serial pool); one that outlives its limit by the stuck grace stops
        the worker (TaskStuck)."""
        async def limited() -> Any:
            with AsyncLimit(seconds, WorkerInterrupt):
                try:
                    return await task.arun(*message.args, **message.kwargs)
                except BaseException as exc:
                    failure = failure_of(exc)
                    if failure is exc:
                        raise
                    raise failure from exc
        try:
            return self.loop.run(limited(), seconds + self.stuck_grace_sec)
        except concurrent.futures.TimeoutError:
            raise TaskStuck('task %s (%s) is still running %gs after its time limit'
                            % (message.task_id, message.task_name,
                               self.stuck_grace_sec)) from None

    def _wait_for_hook(self, hook: Callable[..., Any], *args: Any) -> None:
        """Call a task's hook; a coroutine hook is run on the worker's loop."""
        try:
            value = hook(*args)
            if inspect.isawaitable(value):
                self.loop.run_hook(value, self.stuck_grace_sec)
        except Exception:
            logger.exception('task hook %s failed', getattr(hook, '__qualname__', hook))

    @staticmethod
    def _over_target(task_class: type[Task], message: Message, duration: float) -> bool:
        target = task_class.target_runtime
        if target and duration > target:
            logger.warning('task %s (%s) ran %.3fs, over its target_runtime of %gs',
                           message.task_id, message.task_name, duration, target)
            return True
        return False

    def _fifo_hold_sec(self, batch: Batch, message: Message, delay: int) -> int:
        """A FIFO retry's hold past SQS's 900 s: ``delay``, within the 12
        hours SQS keeps a received message invisible (a warning when cut)."""
        if delay <= MAX_DELAY_SEC:
            return delay
        left = int(MAX_VISIBILITY_SEC - FIFO_HOLD_MARGIN_SEC
                   - (self.clock.monotonic() - batch.received_at))
        if delay <= left:
            return delay
        logger.warning('task %s (%s) on FIFO queue %s: its retry is held %d s, not the %d s '
                       'asked for: SQS keeps a received message invisible at most 12 hours',
                       message.task_id, message.task_name, batch.queue.name, left, delay)
        return max(left, 0)

    def _stopped(self, received: ReceivedMessage, message: Message,
                 envelope: Optional[Frame], started: float) -> Settlement:
        return Settlement(received, Outcome.RELEASE, message=message, envelope=envelope,
                          reason='stopped by shutdown',
                          duration_sec=self.clock.monotonic() - started)

    @staticmethod
    def _ended(received: ReceivedMessage, message: Message, task: Any, result: Any,
               duration: float, envelope: Optional[Frame]) -> Settlement:
        if result is SKIPPED:
            return Settlement(received, Outcome.SKIPPED, message=message, task=task,
                              reason='should_run_task declined', duration_sec=duration,
                              envelope=envelope)
        return Settlement(received, Outcome.SUCCEEDED, message=message, task=task,
                          duration_sec=duration, result=result, envelope=envelope)

    def failed(self, batch: Batch, received: ReceivedMessage, message: Message,
               task_class: Any, task: Any, exc: BaseException, duration: float,
               envelope: Optional[Frame] = None) -> Settlement:
        """A retry (with its delayed copy) or, when the task may not retry, a dead letter
        (with the dead run of a task that handles its dead letters, but for a dead run's
        own failure); a copy of a payload kept in S3 points at the same object."""
        permanent, delay, reason, public = self._decision(task_class, message, exc)
        if batch.fifo and not permanent:    # kept, invisible for the delay (see kale.worker.consumer)
            return Settlement(received, Outcome.RETRY, message=message, reason=reason,
                              task=task, exception=exc, duration_sec=duration,
                              hold_sec=self._fifo_hold_sec(batch, message, delay),
                              envelope=envelope)
        try:
            copy = self._failure_copy(batch, message, envelope, permanent, delay, public)
        except KaleError as encode_error:
            settlement = verbatim_dead_letter(
                received, batch.queue, '%s; copy could not be encoded: %s' % (reason, encode_error),
                message, exc, envelope)
            settlement.task, settlement.duration_sec = task, duration
            return settlement
        settlement = Settlement(received, Outcome.DEAD_LETTER if permanent else Outcome.RETRY,
                                message=message, copy=copy, reason=reason, task=task,
                                exception=exc, duration_sec=duration, envelope=envelope)
        if not permanent and delay > MAX_DELAY_SEC:
            settlement.wait_sec = delay
        if permanent and getattr(task_class, 'handles_dead_letters', False) \
                and not message.dead_of:       # sent in place of the copy, if it can be
            settlement.dead_run = message.dead_run(public)
        return settlement

    def _decision(self, task_class: Any, message: Message,
                  exc: BaseException) -> tuple[Optional[str], int, str, str]:
        """:func:`retry_decision` (a failing policy dead-letters), the reason, and its public form."""
        try:
            permanent, delay = retry_decision(task_class, message, exc, self.config)
        except Exception as policy_error:
            logger.exception('retry policy of %s failed; dead-lettering task %s',
                             message.task_name, message.task_id)
            permanent, delay = 'retry policy failed: %s' % describe(policy_error), 0
        reason = '%s: %s' % (permanent, describe(exc)) if permanent else describe(exc)
        # The error's message may quote the task's data: with task data
        # encrypted, the dead letter's attribute (clear on SQS) does not carry it.
        public = without_message(reason, exc) if self.config.MESSAGE_ENCRYPTION_KEY else reason
        return permanent, delay, reason, public

    def _failure_copy(self, batch: Batch, message: Message, envelope: Optional[Frame],
                      permanent: Optional[str], delay: int, public: str) -> OutgoingMessage:
        """The dead-letter or retry copy, signed with the current key for this queue (a
        dead letter: for the queue it came from), keeping the task's first issue time."""
        if permanent:
            final = dataclasses.replace(message, failure_num=message.failure_num + 1)
            return self.codec.reissue(envelope, final, batch.sqs_name, 0, {
                ATTR_DEAD_LETTER_REASON: public[:MAX_REASON_CHARS],
                ATTR_SOURCE_QUEUE: batch.queue.name})
        retry = message.next_attempt()
        if delay > MAX_DELAY_SEC:   # a long delay: the copy carries its due time
            retry = dataclasses.replace(retry, due_at=self.clock.time() + delay)
        return self.codec.reissue(envelope, retry, batch.sqs_name, min(delay, MAX_DELAY_SEC))


def _overrides(task_class: type[Task], name: str) -> bool:
    return getattr(task_class, name).__func__ is not getattr(Task, name).__func__


def retry_decision(task_class: type[Task], message: Message, exc: BaseException,
                   config: Config) -> tuple[Optional[str], int]:
    """Why the failed run ends the task (None: retry it), and the retry's
    delay: the task's :class:`~kale.retry.RetryPolicy` under the worker's
    configuration, or the task's own ``permanent_failure_reason``,
    ``is_retriable`` or ``retry_delay_sec`` where it overrides them. A
    :class:`~kale.retry.Retry` is judged by its count alone, and waits its
    ``after`` (past SQS's 900 s: a long delay or, on FIFO, a longer hold)."""
    policy = task_class.retry_policy(config)
    if isinstance(exc, Retry):
        return policy.stop_reason(message.failure_num), int(math.ceil(exc.after))
    if _overrides(task_class, 'permanent_failure_reason') or _overrides(task_class, 'is_retriable'):
        permanent = task_class.permanent_failure_reason(message, exc)
    else:
        permanent = policy.stop_reason(message.failure_num, exc)
    if permanent:
        return permanent, 0
    if _overrides(task_class, 'retry_delay_sec'):
        return None, int(task_class.retry_delay_sec(message.retry_num))
    return None, policy.delay_sec(message.retry_num, exc=exc)


def _run_anywhere(task: Task, message: Message) -> Any:
    """A task's run in a child process: a coroutine task on a loop of its own."""
    if type(task).is_coroutine:
        return asyncio.run(task.arun(*message.args, **message.kwargs))
    return task.run(*message.args, **message.kwargs)


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
