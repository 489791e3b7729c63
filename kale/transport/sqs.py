"""The SQS transport over boto3 (docs/explanation/internals-transport.md, "The
AWS modules"), and the AWS clients and error mapping the other AWS modules
share: botocore's exceptions become :class:`kale.exceptions.SQSError` subclasses.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import logging
import platform
import re
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import boto3
import botocore
import botocore.exceptions
from botocore.config import Config as BotoConfig

from kale import config as kale_config
from kale.exceptions import (
    BatchSendError,
    EndpointUnreachableError,
    ImproperlyConfigured,
    QueueNotFoundError,
    SQSError,
    ThrottledError,
)
from kale.logs import redact_aws_loggers
from kale.transport import (
    MAX_BATCH_ENTRIES,
    MAX_LONG_POLL_SEC,
    OutgoingMessage,
    QueueCounts,
    ReceivedMessage,
    VisibilityChange,
    is_fifo,
    message_fields,
    responses,
    split_batches,
)
from kale.transport.attempts import REQUEST_ATTEMPTS, THROTTLING_CODES, Attempts, error_of, not_again
from kale.transport.direct import DirectRequests, ErrorAnswer
from kale.transport.endpoint import endpoint_url, is_local
from kale.version import __version__

logger = logging.getLogger(__name__)

#: The code of a batch entry an answer did not name (sent again).
NO_ANSWER = 'NoAnswer'

DEAD_LETTER_RETENTION_SEC = 14 * 24 * 3600
BATCH_SEND_ATTEMPTS = 3

NOT_FOUND_CODES = frozenset({'AWS.SimpleQueueService.NonExistentQueue', 'QueueDoesNotExist'})

#: What an entry a batch answer does not name failed with (it is sent again).
_UNNAMED = {'Code': NO_ANSWER, 'Message': 'the answer does not say whether it was sent'}

#: SQS's own attributes a receive asks for, as every field costs parsing: the
#: receive count and first receive's time tell a worker which messages a dead
#: worker held (on a FIFO queue, how often a task failed), and the group is a
#: FIFO queue's or a fair queue's tenant.
_SYSTEM_ATTRIBUTES = ['ApproximateReceiveCount', 'ApproximateFirstReceiveTimestamp', 'MessageGroupId']


def read_timeout_sec(config: kale_config.Config) -> float:
    """How long the client waits for an answer: ``SQS_READ_TIMEOUT_SEC`` beyond the longest long poll."""
    return float(config.SQS_READ_TIMEOUT_SEC) + MAX_LONG_POLL_SEC


#: Operator commands (``kale queues``, ``purge``, ``dlq redrive``) make one
#: attempt per request and wait SQS_READ_TIMEOUT_SEC plus this (redrive's
#: short long poll): against an endpoint that never answers, not minutes.
COMMAND_LONG_POLL_SEC = 1


def user_agent() -> str:
    """Kale's SQS User-Agent, sent as is: botocore's, built twice a request, cost 30 µs a task."""
    return 'kale-sqs/%s botocore/%s Python/%s' % (
        __version__, botocore.__version__, platform.python_version())


#: boto3's session arguments and the settings they come from (empty: left to boto3's chain).
SESSION_SETTINGS = {
    'aws_access_key_id': 'AWS_ACCESS_KEY_ID', 'aws_secret_access_key': 'AWS_SECRET_ACCESS_KEY',
    'aws_session_token': 'AWS_SESSION_TOKEN', 'region_name': 'AWS_REGION'}

#: Connections a client keeps open (botocore's: 10): a worker with a pool has
#: receives, settles, polls and extensions out at once; apublish has threads.
MAX_CONNECTIONS = 50


def aws_client(service: str, endpoint: str, config: kale_config.Config, name: str = '',
               **options: Any) -> Any:
    """A new boto3 client of ``service`` at ``endpoint`` ('' for AWS) from the AWS_*
    settings (the region ``us-east-1`` with a custom ``endpoint`` and none anywhere),
    the AWS libraries' debug lines redacted from here on; a setting boto3 refuses
    is one ImproperlyConfigured line naming the client (``name``; none: raised as it comes)."""
    redact_aws_loggers()
    try:
        session = boto3.session.Session(**{argument: getattr(config, setting) or None
                                           for argument, setting in SESSION_SETTINGS.items()})
        if not session.region_name and not endpoint:
            raise ImproperlyConfigured('no AWS region: set AWS_REGION in the settings or '
                                       'AWS_DEFAULT_REGION in the environment')
        options.setdefault('read_timeout', float(config.SQS_READ_TIMEOUT_SEC))
        return session.client(service, endpoint_url=endpoint or None,
                              region_name=session.region_name or 'us-east-1',
                              config=BotoConfig(connect_timeout=config.SQS_CONNECT_TIMEOUT_SEC, **options))
    except (ValueError, botocore.exceptions.BotoCoreError) as exc:
        if not name:
            raise
        raise ImproperlyConfigured(
            'the %s cannot be built from MESSAGE_QUEUE_ENDPOINT_URL=%r and AWS_REGION=%r: %s'
            % (name, endpoint_url(config), config.AWS_REGION, one_line(str(exc)))) from None


def make_client(for_commands: bool = False, *, config: kale_config.Config) -> Any:
    """A new boto3 SQS client built from ``config`` (``for_commands``: see COMMAND_LONG_POLL_SEC)."""
    client = aws_client(
        'sqs', endpoint_url(config), config, 'SQS client',
        read_timeout=(float(config.SQS_READ_TIMEOUT_SEC) + COMMAND_LONG_POLL_SEC
                      if for_commands else read_timeout_sec(config)),
        # One attempt per call: the transport counts them (kale.transport.attempts).
        retries={'mode': 'standard', 'total_max_attempts': 1},
        # Kale builds every request with the types SQS takes: checking them again
        # cost a tenth of publishing's CPU (a value SQS refuses is an SQSError).
        parameter_validation=False, user_agent=user_agent(),
        max_pool_connections=MAX_CONNECTIONS)
    responses.install(client)
    return client


#: botocore's errors for credentials that are missing or incomplete.
CREDENTIALS_ERRORS = (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)


def no_credentials(exc: Exception) -> ImproperlyConfigured:
    """The one line for a client (SQS or S3) that found no usable credentials."""
    return ImproperlyConfigured('no usable AWS credentials (%s): set AWS_ACCESS_KEY_ID and '
                                'AWS_SECRET_ACCESS_KEY, or configure boto3' % exc)


@contextlib.contextmanager
def aws_errors(error: Callable[..., Exception], where: str, endpoint: str,
               answered: Optional[Callable[[str, int, str], Optional[Exception]]] = None) -> Iterator[None]:
    """botocore's failures of a request (``where``: what it did on what) as
    Kale's ``error``; ``answered`` may make the error of an error answer from
    its code, HTTP status and message (None: the one saying its code)."""
    try:
        yield
    except botocore.exceptions.ClientError as exc:
        code, status, message = error_of(exc)
        found = answered(code, status, message) if answered else None
        raise found or error('%s: %s: %s' % (where, code, one_line(message)), code,
                             retryable=status >= 500 or code in THROTTLING_CODES) from None
    except CREDENTIALS_ERRORS as exc:
        raise no_credentials(exc) from None
    except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
        raise error('%s: endpoint %s unreachable: %s' % (where, endpoint, exc), retryable=True) from None
    except botocore.exceptions.BotoCoreError as exc:    # e.g. a read cut short
        raise error('%s failed: %s: %s' % (where, type(exc).__name__, exc), retryable=True) from None


def one_line(text: str, limit: int = 160) -> str:
    """An error text as one short line: an HTML page becomes its title (or its text)."""
    if re.search(r'<(!doctype|html|title|body)\b', text, re.IGNORECASE):
        title = re.search(r'<title>(.*?)</title>', text, re.IGNORECASE | re.DOTALL)
        text = title.group(1) if title else re.sub(r'<[^>]+>', ' ', text)
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


class SQSTransport:
    """:class:`kale.transport.Transport` over a boto3 SQS client: one Kale
    builds from ``config``, whose requests are made up to REQUEST_ATTEMPTS
    times, or ``client`` as given, each request made once (an operator
    command's, a test's: its own retry settings apply)."""

    def __init__(self, client: Any = None, *, config: kale_config.Config):
        self.client = client if client is not None else make_client(config=config)
        self.attempts = Attempts(REQUEST_ATTEMPTS if client is None else 1)
        #: The hot requests built here (kale.transport.direct), for a client
        #: Kale built; one given (a test's stub) gets every request itself.
        self.direct = DirectRequests.of(self.client) \
            if client is None and config.SQS_DIRECT_REQUESTS else None
        #: SQS_BATCH_REQUEST_LIMIT: bytes in one SendMessageBatch.
        self.batch_request_limit = int(config.SQS_BATCH_REQUEST_LIMIT)
        self._urls: dict[str, str] = {}
        self.endpoint = self.client.meta.endpoint_url
        #: Whether the endpoint is on this machine (else development keys are refused).
        self.local = is_local(self.endpoint)

    # --- errors and URLs ---------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, action: str, queue: str) -> Iterator[None]:
        """botocore's failures, and answers of the wrong shape, as SQSErrors
        naming the request (not aws_errors: a hot request enters one context)."""
        try:
            yield
        except (SQSError, RecursionError) as exc:   # kale.transport.responses.malformed
            if isinstance(exc, SQSError) and exc.code != responses.MALFORMED_ANSWER:
                raise
            raise responses.malformed('%s on queue %r: the answer from %s is malformed: %s' % (
                action, queue, self.endpoint, exc if isinstance(exc, SQSError)
                else 'JSON nested too deeply to read')) from None
        except botocore.exceptions.ClientError as exc:
            raise self._answered(action, queue, *error_of(exc)) from None
        except CREDENTIALS_ERRORS as exc:
            raise no_credentials(exc) from None
        except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
            raise EndpointUnreachableError('%s on queue %r: endpoint %s unreachable: %s%s' % (
                action, queue, self.endpoint, exc, not_again(action, exc))) from None
        except ErrorAnswer as exc:          # a direct attempt's answer, not made again
            raise SQSError('%s on queue %r: endpoint %s %s%s' % (
                action, queue, self.endpoint, exc, not_again(action, exc)), retryable=True) from None
        except botocore.exceptions.BotoCoreError as exc:    # e.g. an answer that does not parse
            raise SQSError('%s on queue %r failed: %s: %s' % (action, queue, type(exc).__name__,
                                                              exc), retryable=True) from None

    def _answered(self, action: str, queue: str, code: str, status: int, message: str) -> SQSError:
        """The SQSError of an error answer to ``action``."""
        if code in NOT_FOUND_CODES:
            self._urls.pop(queue, None)
            return QueueNotFoundError('queue %r does not exist at %s' % (queue, self.endpoint), code)
        if code == str(status):         # not an SQS error: a page from something else
            text = '%s on queue %r: endpoint %s answered HTTP %s: %s' % (
                action, queue, self.endpoint, status, one_line(message))
        else:
            text = '%s on queue %r: %s: %s' % (action, queue, code, one_line(message))
        if code in THROTTLING_CODES:
            return ThrottledError(text, code)
        return SQSError(text, code, retryable=status >= 500)

    def _call(self, action: str, queue: str, method: Callable[..., Any], *path: str,
              kind: type = str, **kwargs: Any) -> Any:
        """The answer of a request that is not a hot one, or its field at ``path`` (see _field)."""
        with self._errors(action, queue):
            answer = self.attempts.make(action, lambda: method(**kwargs))
        return self._field(action, queue, answer, *path, kind=kind) if path else answer

    def _request(self, action: str, queue: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        """One of the hot requests (kale.transport.direct.OPERATIONS): its
        first attempt built here when it can be, the others through botocore."""
        direct = self.direct
        with self._errors(action, queue):
            return self.attempts.make(action, lambda: method(**kwargs), None if direct is None
                                      else lambda: direct.call(action, kwargs))

    def _field(self, action: str, queue: str, answer: Any, *path: str, kind: type = str) -> Any:
        """``answer[path[0]][path[1]]...`` of type ``kind``; one an answer cut short
        lacks is a retryable SQSError (NO_ANSWER): the request may have been applied."""
        with self._errors(action, queue):
            value = responses.field(answer, path, kind)
        if value is None:
            raise SQSError('%s on queue %r: the answer from %s has no %s (cut short?)'
                           % (action, queue, self.endpoint, path[-1]), NO_ANSWER, retryable=True)
        return value

    def url(self, queue: str) -> str:
        """The queue's URL (cached)."""
        url = self._urls.get(queue)
        if url is None:
            url = self._urls[queue] = self._call('GetQueueUrl', queue, self.client.get_queue_url,
                                                 'QueueUrl', QueueName=queue)
        return url

    # --- queues -----------------------------------------------------------------

    def queue_exists(self, name: str) -> bool:
        try:
            self.url(name)
        except QueueNotFoundError:
            return False
        return True

    def _get_or_create(self, name: str, attributes: dict[str, str]) -> None:
        if not self.queue_exists(name):
            self._urls[name] = self._call('CreateQueue', name, self.client.create_queue,
                                          'QueueUrl', QueueName=name, Attributes=attributes)
            logger.info('created SQS queue %s', name)

    def ensure_queue(self, name: str, visibility_timeout_sec: int,
                     dead_letter_queue: Optional[str], max_receive_count: int) -> None:
        if self.queue_exists(name):
            return
        fifo = {'FifoQueue': 'true'} if is_fifo(name) else {}
        attributes = dict(fifo, VisibilityTimeout=str(int(visibility_timeout_sec)))
        if dead_letter_queue:
            self._get_or_create(dead_letter_queue,
                                dict(fifo, MessageRetentionPeriod=str(DEAD_LETTER_RETENTION_SEC)))
            attributes['RedrivePolicy'] = json.dumps({
                'deadLetterTargetArn': self.queue_arn(dead_letter_queue),
                'maxReceiveCount': str(int(max_receive_count))})
        self._get_or_create(name, attributes)

    def queue_arn(self, queue: str) -> str:
        """The queue's ARN."""
        return str(self._call('GetQueueAttributes', queue, self.client.get_queue_attributes, 'Attributes',
                              'QueueArn', QueueUrl=self.url(queue), AttributeNames=['QueueArn']))

    def counts(self, queue: str) -> QueueCounts:
        attributes = self._call('GetQueueAttributes', queue, self.client.get_queue_attributes,
                                'Attributes', kind=dict, QueueUrl=self.url(queue),
                                AttributeNames=list(responses.COUNT_ATTRIBUTES.values()))
        with self._errors('GetQueueAttributes', queue):
            return responses.queue_counts(attributes)

    def purge(self, queue: str) -> None:
        self._call('PurgeQueue', queue, self.client.purge_queue, QueueUrl=self.url(queue))

    # --- sending ----------------------------------------------------------------

    def send(self, queue: str, message: OutgoingMessage) -> str:
        answer = self._request('SendMessage', queue, self.client.send_message,
                               QueueUrl=self.url(queue), **message_fields(message))
        return str(self._field('SendMessage', queue, answer, 'MessageId'))

    def send_batch(self, queue: str, messages: Sequence[OutgoingMessage]) -> list[str]:
        # A request's worth at a time (see _batch); after a request that failed,
        # the messages of the requests after it are not sent either.
        done: dict[int, dict[str, Any]] = {}
        failed: dict[int, tuple[str, str]] = {}
        groups = split_batches(messages, self.batch_request_limit)
        for number, group in enumerate(groups):
            try:
                failed.update(self._batch('SendMessageBatch', queue, self.client.send_message_batch,
                                          {i: message_fields(messages[i]) for i in group}, done,
                                          'MessageId')[0])
            except SQSError as exc:
                if number == 0:
                    raise
                failed.update(dict.fromkeys(itertools.chain.from_iterable(groups[number:]),
                                            (exc.code or type(exc).__name__, str(exc))))
                break
        if failed:
            first = next(iter(failed.values()))
            raise BatchSendError('SendMessageBatch on queue %r: %d of %d messages not sent (%s: %s)'
                                 % (queue, len(failed), len(messages), first[0], first[1]), failed,
                                 [done[i]['MessageId'] if i in done else None for i in range(len(messages))])
        return [done[index]['MessageId'] for index in range(len(messages))]

    def _batch(self, action: str, queue: str, method: Callable[..., Any],
               entries: dict[int, dict[str, Any]], done: dict[int, dict[str, Any]],
               success_field: str = '') -> tuple[dict[int, tuple[str, str]], list[int]]:
        """A request's worth of ``entries`` (Id: their index), made again for those
        failed on SQS's side or not named (twice is harmless: a send's task id makes
        it one task); the successes added to ``done``, the failures' (code,
        message), and those tried to the last."""
        reasons: dict[int, dict[str, Any]] = {}
        pending = list(entries)
        for attempt in range(BATCH_SEND_ATTEMPTS):
            if attempt:
                time.sleep(0.05 * 2 ** attempt)
            answer = self._request(action, queue, method, QueueUrl=self.url(queue),
                                   Entries=[dict(entries[i], Id=str(i)) for i in pending])
            with self._errors(action, queue):
                sent, refused = responses.batch_entries(answer, pending, success_field)
            done.update(sent)
            retry = []
            for index in pending:
                if index not in sent:
                    bad = reasons[index] = refused.get(index, _UNNAMED)
                    if not bad.get('SenderFault'):
                        retry.append(index)
            if not retry:
                break
            pending = retry
        return {index: (bad.get('Code', ''), bad.get('Message', ''))
                for index, bad in reasons.items() if index not in done}, retry

    # --- receiving and settling ----------------------------------------------------

    def receive(self, queue: str, max_messages: int, wait_sec: int, visibility_timeout_sec: int,
                attribute_names: Sequence[str] = ('All',)) -> list[ReceivedMessage]:
        response = self._request(
            'ReceiveMessage', queue, self.client.receive_message, QueueUrl=self.url(queue),
            MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_sec,
            VisibilityTimeout=visibility_timeout_sec, MessageAttributeNames=list(attribute_names),
            MessageSystemAttributeNames=_SYSTEM_ATTRIBUTES)
        with self._errors('ReceiveMessage', queue):
            return responses.received_messages(response, attribute_names, time.time() * 1000.0)

    def _batched(self, action: str, queue: str, method: Callable[..., Any],
                 entries: list[dict[str, Any]]) -> list[str]:
        """The receipt handles of the deletes or visibility changes that failed (see _batch)."""
        failed: list[str] = []
        for start in range(0, len(entries), MAX_BATCH_ENTRIES):
            chunk = dict(enumerate(entries[start:start + MAX_BATCH_ENTRIES]))
            refused, tried = self._batch(action, queue, method, chunk, {})
            for index, (code, _) in refused.items():
                if index not in tried:
                    logger.warning('%s on queue %s: entry failed: %s', action, queue, code)
            if tried:
                logger.warning('%s on queue %s: %d entries still failed after %d attempts',
                               action, queue, len(tried), BATCH_SEND_ATTEMPTS)
            failed.extend(chunk[index]['ReceiptHandle'] for index in refused)
        return failed

    def delete_batch(self, queue: str, receipt_handles: Sequence[str]) -> list[str]:
        return self._batched('DeleteMessageBatch', queue, self.client.delete_message_batch,
                             [{'ReceiptHandle': handle} for handle in receipt_handles])

    def change_visibility_batch(self, queue: str, changes: Sequence[VisibilityChange]) -> list[str]:
        return self._batched('ChangeMessageVisibilityBatch', queue,
                             self.client.change_message_visibility_batch,
                             [{'ReceiptHandle': change.receipt_handle,
                               'VisibilityTimeout': int(change.timeout_sec)} for change in changes])
