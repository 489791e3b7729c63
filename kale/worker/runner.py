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

import dataclasses
import logging
from typing import Any, Callable, Optional, Union

from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec import Codec, get_codec
from kale.codec.pipeline import Frame
from kale.conf import settings
from kale.config import Config
from kale.events import Outcome, Settlement
from kale.exceptions import (
    ChildTaskError,
    DecodeError,
    ImproperlyConfigured,
    KaleError,
    PayloadStoreError,
    describe,
    short_reason,
)
from kale.message import ATTR_DEAD_LETTER_REASON, ATTR_SOURCE_QUEUE, Message
from kale.queue_config import TaskQueue
from kale.registry import Registry, get_registry
from kale.settings_check import TASK_ISOLATION_MODES
from kale.task import SKIPPED, Task
from kale.timeout import BaseTimeout, Guard, SignalTimeout, TimeoutGuard
from kale.transport import OutgoingMessage, ReceivedMessage
from kale.worker.batch import Batch, Opened
from kale.worker.isolation import run_in_child
from kale.worker.signals import WorkerInterrupt
from kale.worker.suspects import release_copy

logger = logging.getLogger(__name__)

MAX_REASON_CHARS = 256
#: Delay of the copy that releases a message whose payload S3 did not give
#: back, so that an outage is not a busy loop.
PAYLOAD_RETRY_DELAY_SEC = 30


def dead_letter_attributes(received: ReceivedMessage, queue: TaskQueue,
                           reason: str) -> dict[str, Any]:
    attributes: dict[str, Any] = dict(received.attributes)
    attributes[ATTR_DEAD_LETTER_REASON] = reason[:MAX_REASON_CHARS]
    attributes[ATTR_SOURCE_QUEUE] = queue.name
    return attributes


def verbatim_dead_letter(received: ReceivedMessage, queue: TaskQueue, reason: str,
                         message: Optional[Message] = None,
                         exception: Optional[BaseException] = None,
                         envelope: Optional[Frame] = None) -> Settlement:
    """Dead-letter the body exactly as received (it could not be decoded or
    re-encoded), with the task's attributes when its envelope verified, so
    operators see which task it was."""
    attributes = dead_letter_attributes(received, queue, reason)
    if envelope is not None:
        try:
            attributes = dict(envelope.message_attributes(), **attributes)
        except ValueError:          # a signed but malformed count: the reason says so
            pass
    copy = OutgoingMessage(received.body, attributes)
    return Settlement(received, Outcome.DEAD_LETTER, message=message, copy=copy, reason=reason,
                      exception=exception, envelope=envelope)


def _refused(batch: Batch, received: ReceivedMessage, exc: DecodeError,
             envelope: Optional[Frame] = None) -> Settlement:
    logger.error('message %r on queue %s cannot be handled: %s', received.message_id,
                 batch.queue.name, exc, extra={'queue': batch.queue.name})
    return verbatim_dead_letter(received, batch.queue, str(exc), envelope=envelope)


def _payload_not_fetched(batch: Batch, received: ReceivedMessage, envelope: Frame,
                         exc: PayloadStoreError) -> Settlement:
    """Release a message whose payload S3 did not give back (not the message's
    fault) for PAYLOAD_RETRY_DELAY_SEC: as a delayed copy, or on a FIFO queue,
    where copies take no delay, held invisible in its group."""
    logger.error('task %s (%s): payload not fetched from S3, released for %d s: %s',
                 envelope.task_id, envelope.task_name, PAYLOAD_RETRY_DELAY_SEC, exc)
    reason = 'payload not fetched: %s' % exc
    if batch.fifo:
        return Settlement(received, Outcome.RELEASE, reason=reason, envelope=envelope,
                          hold_sec=PAYLOAD_RETRY_DELAY_SEC)
    copy = release_copy(received, batch.sqs_name, envelope,
                        batch.queue.visibility_timeout_sec)
    return Settlement(received, Outcome.RELEASE, reason=reason, envelope=envelope,
                      copy=dataclasses.replace(copy, delay_sec=PAYLOAD_RETRY_DELAY_SEC))


class TaskRunner:
    """Decodes and runs received messages, one at a time, in this process."""

    def __init__(self, guard: Union[Guard, type[BaseTimeout]] = SignalTimeout,
                 clock: Clock = SYSTEM_CLOCK, isolation: str = 'none',
                 codec: Optional[Codec] = None, registry: Optional[Registry] = None,
                 config: Optional[Config] = None):
        if isolation not in TASK_ISOLATION_MODES:
            raise ImproperlyConfigured('TASK_ISOLATION must be one of %s, got %r'
                                       % (', '.join(map(repr, TASK_ISOLATION_MODES)), isolation))
        #: Holds each run to its time limit (a BaseTimeout class is made one).
        self.guard: Guard = (TimeoutGuard(guard, passes_through=(WorkerInterrupt,))
                             if isinstance(guard, type) else guard)
        self.clock = clock
        self._codec = codec
        self._registry = registry
        self._config = config
        self.isolation = isolation

    @property
    def codec(self) -> Codec:
        """Opens, reads and re-signs messages (by default the settings')."""
        return self._codec or get_codec()

    @property
    def config(self) -> Config:
        """Whose RETRY_DELAY_* settings apply (by default the settings')."""
        return self._config or settings.config

    @property
    def registry(self) -> Registry:
        """Finds the task class a message names (by default the settings')."""
        return self._registry or get_registry()

    def open(self, batch: Batch, received: ReceivedMessage) -> Union[Opened, Settlement]:
        """Verify the envelope (signature, replay window, queue, serializer) and
        find the task class, without decoding the payload; or a dead-letter
        settlement saying why not."""
        codec, resolve = self.codec, self.registry.resolve
        envelope = None
        try:
            envelope = codec.open(received.body, batch.sqs_name)
            if envelope.legacy:         # its task is named in the payload only
                message = codec.read(envelope)
                return Opened(envelope, resolve(message.task_name), message)
            return Opened(envelope, resolve(envelope.task_name))
        except DecodeError as exc:
            return _refused(batch, received, exc, envelope)

    def read(self, batch: Batch, received: ReceivedMessage,
             opened: Opened) -> Union[Message, Settlement]:
        """The opened message's payload, decoded just before it runs, or a
        dead-letter settlement when it is corrupt."""
        try:
            message = opened.message or self.codec.read(opened.envelope)
        except DecodeError as exc:
            return _refused(batch, received, exc, opened.envelope)
        except PayloadStoreError as exc:
            return _payload_not_fetched(batch, received, opened.envelope, exc)
        if batch.fifo:          # retries keep the message: its receives count them
            earlier = received.receive_count - 1
            message = dataclasses.replace(message, retry_num=earlier, failure_num=earlier)
        return message

    def run(self, batch: Batch, received: ReceivedMessage, message: Message,
            task_class: type[Task], envelope: Optional[Frame] = None) -> Settlement:
        """Run the task under its time limit and decide what settling does.
        The settlement keeps the opened ``envelope``: its copies reseal it, and
        once the task is done its payload's S3 object, if any, is deleted."""
        started = self.clock.monotonic()
        task: Any = None
        try:
            task = task_class(message)
            if self.isolation == 'process':
                result = run_in_child(
                    lambda: task.run(*message.args, **message.kwargs), task_class.time_limit,
                    lambda exc: ChildTaskError(describe(exc), task_class.is_retriable(exc)))
            else:
                result = self.guard.run(lambda: task.run(*message.args, **message.kwargs),
                                        task_class.time_limit)
        except WorkerInterrupt:
            return Settlement(received, Outcome.RELEASE, message=message, envelope=envelope,
                              reason='stopped by shutdown', duration_sec=self.clock.monotonic() - started)
        except BaseException as exc:  # a task's failure, whatever it raised
            return self.failed(batch, received, message, task_class, task, exc,
                               self.clock.monotonic() - started, envelope)
        duration = self.clock.monotonic() - started
        if result is SKIPPED:
            return Settlement(received, Outcome.SKIPPED, message=message, task=task,
                              reason='should_run_task declined', duration_sec=duration,
                              envelope=envelope)
        target = task_class.target_runtime
        if target and duration > target:
            logger.warning('task %s (%s) ran %.3fs, over its target_runtime of %gs',
                           message.task_id, message.task_name, duration, target)
            _call_task_hook(task.on_target_runtime_exceeded, duration)
        return Settlement(received, Outcome.SUCCEEDED, message=message, task=task,
                          duration_sec=duration, result=result, envelope=envelope)

    def failed(self, batch: Batch, received: ReceivedMessage, message: Message,
               task_class: Any, task: Any, exc: BaseException, duration: float,
               envelope: Optional[Frame] = None) -> Settlement:
        """A retry (with its delayed copy) or, when the task may not retry, a
        dead letter. A copy of a payload kept in S3 points at the same object."""
        try:
            permanent, delay = retry_decision(task_class, message, exc, self.config)
        except Exception as policy_error:
            logger.exception('retry policy of %s failed; dead-lettering task %s',
                             message.task_name, message.task_id)
            permanent, delay = 'retry policy failed: %s' % describe(policy_error), 0
        reason = '%s: %s' % (permanent, describe(exc)) if permanent else describe(exc)
        # The error's message may quote the task's data: with task data
        # encrypted, the dead letter's attribute (clear on SQS) does not carry it.
        public = short_reason(reason) if self.config.MESSAGE_ENCRYPTION_KEY else reason
        codec, queue = self.codec, batch.queue
        # Copies are signed with the current key, for this queue (a dead letter
        # for the queue it came from), and keep the task's first issue time.
        try:
            if permanent:
                final = dataclasses.replace(message, failure_num=message.failure_num + 1)
                copy = codec.reissue(
                    envelope, final, batch.sqs_name, 0,
                    {ATTR_DEAD_LETTER_REASON: public[:MAX_REASON_CHARS],
                     ATTR_SOURCE_QUEUE: queue.name})
                outcome = Outcome.DEAD_LETTER
            elif batch.fifo:    # kept, invisible for the delay (see kale.worker.consumer)
                return Settlement(received, Outcome.RETRY, message=message, reason=reason,
                                  task=task, exception=exc, duration_sec=duration,
                                  hold_sec=delay, envelope=envelope)
            else:
                copy = codec.reissue(envelope, message.next_attempt(), batch.sqs_name, delay)
                outcome = Outcome.RETRY
        except KaleError as encode_error:
            settlement = verbatim_dead_letter(
                received, queue, '%s; copy could not be encoded: %s' % (reason, encode_error),
                message, exc, envelope)
            settlement.task, settlement.duration_sec = task, duration
            return settlement
        return Settlement(received, outcome, message=message, copy=copy, reason=reason, task=task,
                          exception=exc, duration_sec=duration, envelope=envelope)


def _overrides(task_class: type[Task], name: str) -> bool:
    return getattr(task_class, name).__func__ is not getattr(Task, name).__func__


def retry_decision(task_class: type[Task], message: Message, exc: BaseException,
                   config: Config) -> tuple[Optional[str], int]:
    """Why the failed run ends the task (None: retry it), and the retry's
    delay: the task's :class:`~kale.retry.RetryPolicy` under the worker's
    configuration, or the task's own ``permanent_failure_reason``,
    ``is_retriable`` or ``retry_delay_sec`` where it overrides them."""
    policy = task_class.retry_policy(config)
    if _overrides(task_class, 'permanent_failure_reason') or _overrides(task_class, 'is_retriable'):
        permanent = task_class.permanent_failure_reason(message, exc)
    else:
        permanent = policy.stop_reason(message.failure_num, exc)
    if permanent:
        return permanent, 0
    if _overrides(task_class, 'retry_delay_sec'):
        return None, int(task_class.retry_delay_sec(message.retry_num))
    return None, policy.delay_sec(message.retry_num)


def _call_task_hook(hook: Callable[..., Any], *args: Any) -> None:
    try:
        hook(*args)
    except Exception:
        logger.exception('task hook %s failed', getattr(hook, '__qualname__', hook))
