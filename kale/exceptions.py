"""Every error Kale raises, in one tree rooted at :class:`KaleError`.

Catch ``KaleError`` to handle anything Kale reports; catch a subclass to
handle one kind of problem. Messages are one line and name the thing that is
wrong (the task, the queue, the setting or the file); an API answer gives
an error's ``public`` message instead when it has one (no file's path).
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence


class KaleError(Exception):
    """Root of every error Kale raises. ``public``: the message as an API
    caller may read it, when the message names a file of the machine."""

    #: The attributes that rebuild it when unpickled, its constructor's
    #: arguments in order ('message': its message); empty: Exception's way.
    _pickled: tuple[str, ...] = ()

    def __init__(self, *args: Any, public: Optional[str] = None):
        super().__init__(*args)
        self.public = public

    def __reduce__(self) -> Any:
        if not self._pickled:
            return super().__reduce__()
        return (type(self), tuple(str(self) if name == 'message' else getattr(self, name)
                                  for name in self._pickled))


class _CodedError(KaleError):
    """A failed request: ``code``, the service's error code when there is
    one; ``retryable``, whether trying again later may succeed."""

    default_retryable = False
    _pickled = ('message', 'code', 'retryable')

    def __init__(self, message: str, code: Optional[str] = None,
                 retryable: Optional[bool] = None):
        super().__init__(message)
        self.code = code
        self.retryable = self.default_retryable if retryable is None else retryable


# --- configuration --------------------------------------------------------

class ImproperlyConfigured(KaleError):
    """A setting, settings module or installed extra is missing or wrong."""


class FauxqsError(ImproperlyConfigured):
    """fauxqs (``kale sqs-local --engine fauxqs``) cannot be installed or
    started: Node.js or npm missing, the npm registry unreachable."""


class QueueConfigError(ImproperlyConfigured):
    """The queue configuration file cannot be read or does not validate."""


class TaskDefinitionError(ImproperlyConfigured):
    """A Task subclass is defined in a way Kale cannot honour (an old hook, a bad attribute)."""


class HookError(KaleError):
    """A hook whose failure stops what it guards (``on_worker_startup``) raised."""


class NoDeadLetterQueueError(ImproperlyConfigured):
    """A dead-letter operation on a queue with ``ENABLE_DEAD_LETTER_QUEUE`` off."""


# --- publishing -----------------------------------------------------------

class PublishError(KaleError):
    """A task was refused at publish time; nothing was sent."""


class UnknownQueueError(PublishError):
    """A task or command names a queue that the queue config does not define."""


class InvalidTimeLimitError(PublishError):
    """A task's ``time_limit`` is not a positive number of seconds, or is over
    the 12 hours SQS can keep a message invisible."""


class InvalidDelayError(PublishError):
    """``delay_sec`` is not a number of seconds within 0..365 days, ``eta`` is
    not a timezone-aware datetime within 365 days, both are given, or either
    delays a task on a FIFO queue (which cannot delay a message)."""


class InvalidGroupError(PublishError):
    """``group_id`` or ``dedup_id`` is missing, not allowed or malformed: a FIFO
    queue needs a group, a standard queue takes neither."""


class MessageTooLargeError(PublishError):
    """The encoded message is over ``SQS_TASK_SIZE_LIMIT`` (with ``PAYLOAD_BUCKET``
    unset; with it set, payloads that big are kept in S3)."""


class SerializationError(PublishError):
    """The task's arguments or app_data cannot be serialized."""


class UnknownTaskPathError(PublishError):
    """``kale publish`` was given a path that is not an importable Task class."""


# --- decoding -------------------------------------------------------------

class DecodeError(KaleError):
    """A message body could not be turned into a verified task message.
    ``reason`` is one of :attr:`REASONS`, and what a dead-letter copy's
    ``kale_dead_letter_reason`` starts with; ``body`` keeps the raw body so
    that the caller can dead-letter it unchanged."""

    BAD_SIGNATURE = 'bad_signature'
    NOT_KALE = 'not_kale_message'
    UNKNOWN_TASK = 'unknown_task'
    CORRUPT = 'corrupt_body'
    TOO_LARGE = 'too_large'
    EXPIRED = 'expired'
    WRONG_QUEUE = 'wrong_queue'
    SERIALIZER_NOT_ACCEPTED = 'serializer_not_accepted'
    #: The S3 object a signed pointer names does not exist (any more).
    PAYLOAD_MISSING = 'payload_missing'
    #: The S3 object's size or SHA-256 is not what the signed pointer says.
    PAYLOAD_MISMATCH = 'payload_mismatch'

    REASONS = (BAD_SIGNATURE, NOT_KALE, UNKNOWN_TASK, CORRUPT, TOO_LARGE, EXPIRED, WRONG_QUEUE,
               SERIALIZER_NOT_ACCEPTED, PAYLOAD_MISSING, PAYLOAD_MISMATCH)
    _pickled = ('reason', 'detail', 'body')

    def __init__(self, reason: str, detail: str, body: Optional[str] = None):
        if reason not in self.REASONS:
            raise ValueError('unknown decode failure reason %r' % (reason,))
        super().__init__('%s: %s' % (reason, detail))
        self.reason = reason
        self.detail = detail
        self.body = body


# --- SQS ------------------------------------------------------------------

class SQSError(_CodedError):
    """An SQS request failed. ``code`` is the SQS error code when there is one;
    ``retryable`` says whether trying again later may succeed (outages,
    throttling, server-side errors)."""


class TopicError(SQSError):
    """A topic cannot be published to or set up: an SNS request failed, the
    topic does not exist (and AUTO_CREATE_TOPICS is off), or its subscribers
    are declared wrongly."""


class QueueNotFoundError(SQSError):
    """The SQS queue does not exist (and Kale was not allowed to create it)."""


class EndpointUnreachableError(SQSError):
    """The SQS endpoint could not be reached (connection refused, timeout)."""

    default_retryable = True


class ThrottledError(SQSError):
    """SQS refused the request because of its rate limits."""

    default_retryable = True


class BatchSendError(SQSError):
    """Some entries of a batch send failed even after retrying. ``failed``
    maps the index of each failed entry (in the order given) to its SQS error
    code and message; ``message_ids`` holds the SQS message id of each entry
    sent, ``None`` where it was not."""

    _pickled = ('message', 'failed', 'message_ids')

    def __init__(self, message: str, failed: dict[int, tuple[str, str]],
                 message_ids: Sequence[Optional[str]]):
        super().__init__(message, code=next(iter(failed.values()))[0] if failed else None)
        self.failed = failed
        self.message_ids = list(message_ids)


# --- the payload store (S3) ----------------------------------------------------

class PayloadStoreError(_CodedError):
    """A request to the payload store (``PAYLOAD_BUCKET`` on S3) failed.
    ``retryable`` says whether trying again later may succeed (an outage,
    throttling, a server-side error)."""


class PayloadMissingError(PayloadStoreError):
    """The payload object asked for does not exist."""


# --- running tasks --------------------------------------------------------

class TaskError(KaleError):
    """Base for errors raised about a task while it runs."""


class TimeLimitExceeded(TaskError):
    """A task ran past its ``time_limit`` and was stopped."""

    _pickled = ('seconds',)

    def __init__(self, seconds: float):
        super().__init__('time limit of %gs exceeded' % (seconds,))
        self.seconds = seconds


class ThreadTimeLimit(TimeLimitExceeded):
    """What a worker raises inside a task's thread at its time limit (made
    there without arguments; the task fails with a TimeLimitExceeded naming
    its limit in its place)."""

    def __init__(self, seconds: float = 0.0):
        super().__init__(seconds)
        if not seconds:
            self.args = ('time limit exceeded',)


class NonRetriableTaskError(TaskError):
    """Raise from ``run_task`` to fail the task permanently, with no retry."""


class InvalidRetryError(TaskError, ValueError):
    """``Retry`` was given a bad ``after`` or ``exc`` (raised where it is made)."""


#: The longest ``Retry(after=...)``: 365 days, as a publish's (kale.delays.MAX_WAIT_SEC).
MAX_RETRY_AFTER_SEC = 365 * 24 * 3600


class Retry(TaskError):
    """Raise from ``run_task`` (``from kale import Retry``) to retry the task
    after ``after`` seconds (0..365 days) instead of its usual delay, with
    ``exc`` (optional) the cause its logs, record and dead-letter reason name:
    ``raise Retry(after=30, exc=error)``. It counts against ``max_retries``;
    ``is_retriable`` is not asked (see :mod:`kale.retry`). A bad ``after``
    or ``exc`` raises InvalidRetryError at once, in the task."""

    _pickled = ('after', 'exc')

    def __init__(self, after: float, exc: Optional[BaseException] = None):
        if isinstance(after, bool) or not isinstance(after, numbers.Real) \
                or not 0 <= float(after) <= MAX_RETRY_AFTER_SEC:   # NaN and inf fail this too
            raise InvalidRetryError('Retry(after=...) must be a number of seconds within 0..%d '
                                    '(365 days), got %r' % (MAX_RETRY_AFTER_SEC, after))
        if exc is not None and not isinstance(exc, BaseException):
            raise InvalidRetryError('Retry(exc=...) must be an exception or None, got %r' % (exc,))
        seconds = ('%.3f' % float(after)).rstrip('0').rstrip('.')
        super().__init__('after %s s' % seconds + (': ' + describe(exc) if exc is not None else ''))
        self.after: float = float(after)
        self.exc: Optional[BaseException] = exc
        self.__cause__ = exc            # its traceback shows the cause's first


class ExecutorError(TaskError):
    """An executor program could not run, or its run failed. The message
    starts with the reason: ``unknown_method``, ``bad_input`` (exit status
    65, or arguments that are not a JSON list), ``bad_output`` (standard
    output that is not one JSON value, or too long) or ``failed`` (another
    exit status, or a signal)."""

    #: Reasons that fail the task for good, with no retry.
    PERMANENT = ('unknown_method', 'bad_input')

    @property
    def reason(self) -> str:
        return str(self).split(':', 1)[0]


class TaskProcessDied(TaskError):
    """The child process running a task (``TASK_ISOLATION = 'process'``)
    exited without reporting a result."""


class ChildTaskError(TaskError):
    """Stands in for an exception raised in a task's child process
    (``TASK_ISOLATION = 'process'``) that could not be sent back whole: it
    keeps the description and whether the task may retry it."""

    _pickled = ('message', 'retriable')

    def __init__(self, description: str, retriable: bool = True):
        super().__init__(description)
        self.retriable = retriable


# --- task records ---------------------------------------------------------

class RecordsError(KaleError):
    """A task-records operation failed (the store, or what was asked of it)."""


class RecordsUnavailableError(RecordsError):
    """The records store cannot be reached or refused a query."""


class RecordNotFoundError(RecordsError):
    """No record has the task id asked for (never recorded, or purged)."""


class RecordConflictError(RecordsError):
    """The task's state does not allow the action (cancel a finished task,
    retry one that did not fail, retry one whose inputs were not stored)."""


class TaskWaitTimeout(RecordsError):
    """``kale.records.wait`` timed out before the task finished."""


class TaskResultError(RecordsError):
    """``kale.records.result`` asked for the result of a task that did not succeed."""


class BadFilterError(RecordsError):
    """A records filter (status, cursor, limit, time, label) is not valid."""


# --- workflows ------------------------------------------------------------

class WorkflowError(KaleError):
    """A workflow could not be built, submitted or followed."""


class InvalidFlowError(WorkflowError):
    """A flow that cannot run: a cycle, a node placed twice, arguments run_task refuses."""


class NotAllowedError(KaleError):
    """What ``kale web`` does not do as configured (submitting without a token)."""


class OutboxError(KaleError):
    """The outbox cannot take a task, or the relay cannot serve a database
    (its tables missing, another relay holding a SQLite database)."""


class SubmissionError(KaleError):
    """A JSON submission (``kale submit``, ``POST /api/workflows``) that
    cannot run: not JSON, off the schema, a reference to nothing, a cycle,
    an unknown task or queue. Nothing was recorded or sent."""


class WorkflowNotFoundError(WorkflowError):
    """No workflow has the id asked for."""


class WorkflowConflictError(WorkflowError):
    """The workflow's status does not allow the action (retry a running one)."""


class WorkflowFailed(WorkflowError):
    """A node failed for good: ``Workflow.result`` raises it, naming the node and error."""


class CommandError(KaleError):
    """A command was used wrongly (bad JSON, no confirmation)."""


class PortInUseError(KaleError):
    """A local server cannot listen on the address and port asked for."""


# --- webhooks ---------------------------------------------------------------

class WebhookError(KaleError):
    """A webhook that cannot be added or changed (its topic, URL, method,
    headers or labels), or one that cannot be used as stored."""


class WebhookNotFoundError(RecordNotFoundError):
    """No webhook has the id asked for."""


class WebhookAddressRefused(WebhookError):
    """A webhook's URL leads to an address it may not reach (private,
    loopback, link-local, metadata, ...) and its host is not in
    WEBHOOK_ALLOWED_HOSTS."""


class WebhookDeliveryError(TaskError):
    """A delivery that failed in a way worth retrying (408, 429, 5xx, a
    timeout, a connection error); ``retry_after_sec``: the delay the answer's
    ``Retry-After`` asked for, which the retry honours (kale.retry)."""

    _pickled = ('message', 'retry_after_sec')

    def __init__(self, description: str, retry_after_sec: Optional[float] = None):
        super().__init__(description)
        self.retry_after_sec = retry_after_sec


class WebhookRejectedError(NonRetriableTaskError):
    """A delivery that failed for good: another 4xx, an address refused,
    too many redirects, a webhook whose stored row does not verify."""


class ScheduleError(ImproperlyConfigured):
    """A schedule that cannot run (its cron, zone, interval, catch-up, task
    or queue), or a scheduler that cannot start."""


class ScheduleNotFoundError(RecordNotFoundError):
    """No schedule has the name asked for."""


def describe(exc: BaseException) -> str:
    """One line naming an exception's type and message, for logs and reasons."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ''
    name = type(exc).__name__
    return '%s: %s' % (name, text) if text else name


__all__ = [
    'BadFilterError', 'BatchSendError', 'ChildTaskError', 'CommandError', 'DecodeError',
    'EndpointUnreachableError', 'ExecutorError', 'FauxqsError', 'HookError',
    'ImproperlyConfigured', 'InvalidDelayError', 'InvalidFlowError', 'InvalidGroupError',
    'InvalidRetryError', 'InvalidTimeLimitError', 'KaleError', 'MessageTooLargeError',
    'NoDeadLetterQueueError', 'NonRetriableTaskError', 'NotAllowedError', 'OutboxError',
    'PayloadMissingError', 'PayloadStoreError', 'PortInUseError', 'PublishError',
    'QueueConfigError', 'QueueNotFoundError', 'RecordConflictError', 'RecordNotFoundError',
    'RecordsError', 'RecordsUnavailableError', 'Retry', 'SQSError', 'ScheduleError',
    'ScheduleNotFoundError', 'SerializationError', 'SubmissionError', 'TaskDefinitionError',
    'TaskError', 'TaskProcessDied', 'TaskResultError', 'TaskWaitTimeout', 'ThreadTimeLimit',
    'ThrottledError', 'TimeLimitExceeded', 'TopicError', 'UnknownQueueError',
    'UnknownTaskPathError', 'WebhookAddressRefused', 'WebhookDeliveryError', 'WebhookError',
    'WebhookNotFoundError', 'WebhookRejectedError', 'WorkflowConflictError', 'WorkflowError',
    'WorkflowFailed', 'WorkflowNotFoundError', 'describe'
]
