"""The broker: configured queues on top of a transport, by their SQS names, each
declared once per process (docs/explanation/internals-top.md, "The broker")."""
from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Callable, Optional, Sequence, TypeVar

from kale.codec import Codec, build_codec
from kale.codec.keys import signing_keys
from kale.config import Config
from kale.exceptions import ImproperlyConfigured, KaleError, QueueNotFoundError
from kale.queue_config import QUEUE_NAME_PATTERN, QueueConfig, TaskQueue, dead_run_side
from kale.transport import (
    FIFO_SUFFIX,
    OutgoingMessage,
    QueueCounts,
    ReceivedMessage,
    Transport,
    VisibilityChange,
)

_T = TypeVar('_T')

logger = logging.getLogger(__name__)

class Broker:
    """Queue operations on configured queues, by way of a transport."""

    def __init__(self, transport: Transport, queues: QueueConfig, prefix: str = '',
                 create_missing: bool = True, dead_letters: bool = True,
                 max_receive_count: int = 10, config: Optional[Config] = None,
                 codec: Optional[Codec] = None):
        if prefix and not QUEUE_NAME_PATTERN.match(prefix):
            raise ImproperlyConfigured("QUEUE_PREFIX may hold only letters, digits, '-' and '_', "
                                       'got %r' % (prefix,))
        if not getattr(transport, 'local', False):      # remote queues: no short or development keys
            if config is None:
                raise TypeError('a broker over a remote transport needs its configuration')
            signing_keys(strong=True, config=config)
        self.transport = transport
        #: The configuration it was built from (None: made by hand, as tests do).
        self.config = config
        self.queues = queues
        self.prefix = prefix
        self.create_missing = create_missing
        self.dead_letters = dead_letters
        self.max_receive_count = max_receive_count
        self._declared: set[str] = set()
        self._lock = threading.Lock()
        self._declaring: dict[str, threading.Lock] = {}     # a lock per queue being declared
        self._dead_run_sides: dict[str, TaskQueue] = {}
        self._codec = codec

    @property
    def codec(self) -> Codec:
        """The codec it was given (its app's), or one of its configuration."""
        if self._codec is None:
            if self.config is None:
                raise TypeError('a broker made without a configuration has no codec: give it '
                                'codec= or config=')
            self._codec = build_codec(self.config)
        return self._codec

    @classmethod
    def from_config(cls, config: Config, transport: Transport, queues: QueueConfig,
                    codec: Optional[Codec] = None) -> 'Broker':
        """The broker ``config`` describes, over ``transport``, on ``queues``."""
        return cls(transport, queues, prefix=config.QUEUE_PREFIX or '',
                   create_missing=bool(config.CREATE_MISSING_QUEUES),
                   dead_letters=bool(config.ENABLE_DEAD_LETTER_QUEUE),
                   max_receive_count=int(config.MAX_RECEIVE_COUNT), config=config, codec=codec)


    # --- names ------------------------------------------------------------

    def _checked(self, name: str) -> str:
        if len(name) > 80:
            raise ImproperlyConfigured('SQS queue name %r is longer than 80 characters; '
                                       'shorten QUEUE_PREFIX or the queue name' % name)
        return name

    def sqs_name(self, queue: TaskQueue) -> str:
        """The queue's full SQS name (ending in ``.fifo`` for a FIFO queue)."""
        return self._checked(self.prefix + queue.name + (FIFO_SUFFIX if queue.fifo else ''))

    def dead_letter_name(self, queue: TaskQueue) -> Optional[str]:
        """The full SQS name of the queue's dead-letter queue (FIFO for a FIFO
        queue), or None when disabled."""
        if not self.dead_letters:
            return None
        return self._checked(self.prefix + queue.dead_letter_queue
                             + (FIFO_SUFFIX if queue.fifo else ''))

    def dead_run_queue(self, queue: TaskQueue) -> TaskQueue:
        """The dead-run side of ``queue`` (see :func:`~kale.queue_config.dead_run_side`)."""
        side = self._dead_run_sides.get(queue.name)
        if side is None:
            side = self._dead_run_sides[queue.name] = dead_run_side(queue)
        return side

    def dead_run_name(self, queue: TaskQueue) -> Optional[str]:
        """The full SQS name of the queue's dead-run queue, or None when
        dead-letter queues are disabled (a task that fails for good is dropped)."""
        if not self.dead_letters:
            return None
        return self.sqs_name(self.dead_run_queue(queue))

    # --- declaring ----------------------------------------------------------------

    def declare(self, queue: TaskQueue) -> str:
        """Make sure the queue (and its dead-letter queue) exist; returns its SQS name."""
        name = self.sqs_name(queue)
        if name in self._declared:
            return name
        with self._lock:
            lock = self._declaring.setdefault(name, threading.Lock())
        with lock:          # one queue at a time, several queues at once
            if name not in self._declared:
                if self.create_missing:
                    self.transport.ensure_queue(name, queue.visibility_timeout_sec,
                                                self.dead_letter_name(queue),
                                                self.max_receive_count)
                elif not self.transport.queue_exists(name):
                    raise QueueNotFoundError('queue %r (SQS name %r) does not exist and '
                                             'CREATE_MISSING_QUEUES is off' % (queue.name, name))
                self._declared.add(name)
        return name

    def declare_all(self, queues: Sequence[TaskQueue]) -> None:
        """Declare the queues not declared yet, at once (one round trip for them
        all); one that cannot be declared now is left to its first use."""
        pending = [queue for queue in queues if self.sqs_name(queue) not in self._declared]
        if len(pending) < 2:
            for queue in pending:
                self._try_declare(queue)
            return
        with concurrent.futures.ThreadPoolExecutor(
                len(pending), thread_name_prefix='kale-declare') as declaring:
            list(declaring.map(self._try_declare, pending))

    def _try_declare(self, queue: TaskQueue) -> None:
        try:
            self.declare(queue)
        except KaleError as exc:
            logger.debug('queue %s not declared yet: %s', queue.name, exc)

    def _request(self, queue: TaskQueue, operation: Callable[..., _T], *args: Any) -> _T:
        """``operation(*args)``; a queue deleted under a running process
        (QueueNotFoundError) is declared again on next use."""
        try:
            return operation(*args)
        except QueueNotFoundError:
            self._declared.discard(self.sqs_name(queue))
            raise

    # --- operations -------------------------------------------------------

    def _send(self, queue: TaskQueue, name: str, messages: Sequence[OutgoingMessage]) -> list[str]:
        if len(messages) == 1:
            return [self._request(queue, self.transport.send, name, messages[0])]
        return self._request(queue, self.transport.send_batch, name, messages)

    def send(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send messages to the queue: one SendMessage, or SendMessageBatch for several."""
        return self._send(queue, self.declare(queue), messages)

    def send_dead_letters(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send copies to the queue's dead-letter queue."""
        self.declare(queue)
        name = self.dead_letter_name(queue)
        if name is None:
            raise ImproperlyConfigured('ENABLE_DEAD_LETTER_QUEUE is off')
        return self._send(queue, name, messages)

    def send_dead_runs(self, queue: TaskQueue, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send dead runs of the queue's tasks to its dead-run queue."""
        if not self.dead_letters:
            raise ImproperlyConfigured('ENABLE_DEAD_LETTER_QUEUE is off')
        side = self.dead_run_queue(queue)
        return self._send(side, self.declare(side), messages)

    def receive(self, queue: TaskQueue, max_messages: Optional[int] = None,
                wait_sec: Optional[int] = None,
                attribute_names: Sequence[str] = ()) -> list[ReceivedMessage]:
        """Receive a batch with the queue's batch size, long poll and visibility
        timeout; no message attributes by default (unsigned: the envelope says the same)."""
        return self._request(queue, self.transport.receive, self.declare(queue),
                             queue.batch_size if max_messages is None else max_messages,
                             queue.long_poll_time_sec if wait_sec is None else wait_sec,
                             queue.visibility_timeout_sec, attribute_names)

    def delete(self, queue: TaskQueue, receipt_handles: Sequence[str]) -> list[str]:
        """Delete received messages; returns the handles that failed."""
        if not receipt_handles:
            return []
        return self._request(queue, self.transport.delete_batch, self.declare(queue),
                             receipt_handles)

    def change_visibility(self, queue: TaskQueue, changes: Sequence[VisibilityChange]) -> list[str]:
        """Change received messages' visibility timeouts; returns the handles that failed."""
        if not changes:
            return []
        return self._request(queue, self.transport.change_visibility_batch, self.declare(queue),
                             changes)

    def counts(self, queue: TaskQueue) -> QueueCounts:
        """Approximate visible, in-flight and delayed counts of the queue."""
        return self._request(queue, self.transport.counts, self.declare(queue))
