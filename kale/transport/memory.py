"""An in-memory stand-in for SQS, for unit tests and benchmarks, with the SQS
semantics the worker depends on (FIFO queues too, and LocalStack's FIFO
receive with ``localstack_fifo``): docs/explanation/internals-transport.md,
"The memory transport".
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import re
import threading
from typing import Callable, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import QueueNotFoundError, SQSError
from kale.ids import random_id
from kale.transport import (
    FIFO_DEDUP_WINDOW_SEC,
    MAX_BATCH_ENTRIES,
    MAX_LONG_POLL_SEC,
    OutgoingMessage,
    QueueCounts,
    ReceivedMessage,
    VisibilityChange,
    is_fifo,
)

_HANDLE = re.compile(r'[0-9a-f]{32}\.[0-9a-f]{32}')
_nonces = itertools.count(1)


def _wanted(attributes: dict[str, str], names: Sequence[str]) -> dict[str, str]:
    """The attributes a receive asked for: all of them with 'All'."""
    if 'All' in names:
        return dict(attributes)
    return {name: value for name, value in attributes.items() if name in names}


def _message_id(handle: str) -> Optional[str]:
    """The message id in a receipt handle; None when it is not a receipt handle."""
    return handle[:32] if _HANDLE.fullmatch(handle) else None


@dataclasses.dataclass
class _Stored:
    message_id: str
    body: str
    attributes: dict
    sent_at: float                  # epoch seconds, like SQS's SentTimestamp
    visible_at: float               # on the transport's clock
    receive_count: int = 0
    receipt_handle: str = ''
    version: int = 0
    group_id: str = ''
    first_received_at: float = 0.0  # on the transport's clock
    #: ``localstack_fifo``: its place among the messages in flight (by their
    #: last receive), 0 once it was put back.
    in_flight: int = 0


@dataclasses.dataclass
class _Queue:
    name: str
    dead_letter_queue: Optional[str] = None
    max_receive_count: int = 0
    messages: dict[str, _Stored] = dataclasses.field(default_factory=dict)
    heap: list[tuple[float, int, str, int]] = dataclasses.field(default_factory=list)
    #: FIFO: deduplication id -> (message id, when it is forgotten)
    dedup: dict[str, tuple[str, float]] = dataclasses.field(default_factory=dict)
    #: ``localstack_fifo``: the groups a receive blocked and nothing unblocked since.
    blocked: set[str] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        self.fifo = is_fifo(self.name)


class MemoryTransport:
    """:class:`kale.transport.Transport` in this process's memory (thread-safe)."""

    #: Its queues live in this process: development keys are fine.
    local = True
    #: Its workers run in the process of a test (see kale.worker.limits).
    in_process = True

    def __init__(self, latency_sec: float = 0.0, clock: Clock = SYSTEM_CLOCK,
                 on_request: Optional[Callable[[str], None]] = None, localstack_fifo: bool = False):
        self.latency_sec = latency_sec
        #: FIFO queues behave as LocalStack's, not as SQS's (see the module's docs page).
        self.localstack_fifo = localstack_fifo
        self.clock = clock
        self.on_request = on_request
        self.requests: collections.Counter[str] = collections.Counter()
        #: Deletes (and visibility changes) made after the message's visibility
        #: timeout had already ended: a worker holding a message past its budget.
        self.late_settles = 0
        self._queues: dict[str, _Queue] = {}
        self._lock = threading.Condition()
        self._sequence = itertools.count()
        self._flights = itertools.count(1)

    # --- helpers ------------------------------------------------------------

    def _request(self, operation: str) -> None:
        with self._lock:
            self.requests[operation] += 1
        if self.on_request is not None:
            self.on_request(operation)
        if self.latency_sec:
            self.clock.sleep(self.latency_sec)

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            raise QueueNotFoundError('queue %r does not exist (memory transport)' % name,
                                     'AWS.SimpleQueueService.NonExistentQueue')
        return queue

    def _push(self, queue: _Queue, stored: _Stored) -> None:
        if queue.fifo:
            return                      # a FIFO queue is read in send order instead
        heapq.heappush(queue.heap, (stored.visible_at, next(self._sequence),
                                    stored.message_id, stored.version))

    def _add(self, queue: _Queue, stored: _Stored, dedup_id: str = '') -> str:
        if queue.fifo and dedup_id:
            now = self.clock.monotonic()
            seen = queue.dedup.get(dedup_id)
            if seen is not None and seen[1] > now:
                return seen[0]          # accepted, and dropped: SQS's deduplication
            queue.dedup[dedup_id] = (stored.message_id, now + FIFO_DEDUP_WINDOW_SEC)
        queue.messages[stored.message_id] = stored
        self._push(queue, stored)
        self._lock.notify_all()
        return stored.message_id

    def _new(self, queue: _Queue, message: OutgoingMessage) -> _Stored:
        if queue.fifo:
            if not message.group_id or not message.dedup_id:
                raise SQSError('a message sent to FIFO queue %r needs a MessageGroupId and a '
                               'MessageDeduplicationId' % queue.name, 'MissingParameter')
            if message.delay_sec:
                raise SQSError('FIFO queue %r takes no per-message DelaySeconds' % queue.name,
                               'InvalidParameterValue')
        # Attributes are kept as received ones read: text.
        attributes = {name: str(value) for name, value in message.attributes.items()}
        return _Stored(random_id(), message.body, attributes, self.clock.time(),
                       self.clock.monotonic() + message.delay_sec,
                       group_id=message.group_id)     # a standard queue keeps it too

    # --- queues ---------------------------------------------------------------

    def ensure_queue(self, name: str, visibility_timeout_sec: int,
                     dead_letter_queue: Optional[str], max_receive_count: int) -> None:
        self._request('CreateQueue')
        if dead_letter_queue and is_fifo(dead_letter_queue) != is_fifo(name):
            raise SQSError('the dead-letter queue %r of %r must be a %s queue' % (
                dead_letter_queue, name, 'FIFO' if is_fifo(name) else 'standard'), 'InvalidParameterValue')
        with self._lock:
            if dead_letter_queue:
                self._queues.setdefault(dead_letter_queue, _Queue(dead_letter_queue))
            self._queues.setdefault(name, _Queue(name, dead_letter_queue, max_receive_count))

    def queue_exists(self, name: str) -> bool:
        self._request('GetQueueUrl')
        with self._lock:
            return name in self._queues

    def counts(self, queue: str) -> QueueCounts:
        self._request('GetQueueAttributes')
        with self._lock:
            now = self.clock.monotonic()
            kinds = collections.Counter(
                'visible' if s.visible_at <= now else 'in_flight' if s.receipt_handle else 'delayed'
                for s in self._queue(queue).messages.values())
            return QueueCounts(kinds['visible'], kinds['in_flight'], kinds['delayed'])

    def purge(self, queue: str) -> None:
        self._request('PurgeQueue')
        with self._lock:
            target = self._queue(queue)
            target.messages.clear()
            target.heap.clear()
            target.blocked.clear()

    # --- sending -----------------------------------------------------------------

    def send(self, queue: str, message: OutgoingMessage) -> str:
        self._request('SendMessage')
        with self._lock:
            target = self._queue(queue)
            return self._add(target, self._new(target, message), message.dedup_id)

    def send_batch(self, queue: str, messages: Sequence[OutgoingMessage]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(messages), MAX_BATCH_ENTRIES):
            self._request('SendMessageBatch')
            with self._lock:
                target = self._queue(queue)
                ids.extend(self._add(target, self._new(target, m), m.dedup_id)
                           for m in messages[start:start + MAX_BATCH_ENTRIES])
        return ids

    # --- receiving and settling -------------------------------------------------

    def receive(self, queue: str, max_messages: int, wait_sec: int, visibility_timeout_sec: int,
                attribute_names: Sequence[str] = ('All',)) -> list[ReceivedMessage]:
        if not 1 <= max_messages <= MAX_BATCH_ENTRIES:
            raise SQSError('MaxNumberOfMessages must be 1..10, got %d' % max_messages,
                           'InvalidParameterValue')
        if not 0 <= wait_sec <= MAX_LONG_POLL_SEC:
            raise SQSError('WaitTimeSeconds must be 0..%d, got %d' % (MAX_LONG_POLL_SEC, wait_sec),
                           'InvalidParameterValue')
        self._request('ReceiveMessage')
        deadline = self.clock.monotonic() + wait_sec
        waited = 0.0        # a long poll ends after wait_sec of waiting, on a FakeClock too
        with self._lock:
            while True:
                found = self._take(self._queue(queue), max_messages, visibility_timeout_sec, attribute_names)
                left = min(deadline - self.clock.monotonic(), wait_sec - waited)
                if found or left <= 0:
                    return found
                self._lock.wait(min(left, 0.05))
                waited += min(left, 0.05)

    def _take(self, queue: _Queue, max_messages: int, timeout: int,
              attribute_names: Sequence[str]) -> list[ReceivedMessage]:
        now = self.clock.monotonic()
        take = self._take_standard if not queue.fifo \
            else self._take_localstack if self.localstack_fifo else self._take_fifo
        delivered = take(queue, max_messages, timeout, now)
        for stored in delivered:     # pushed after the loop: at most once per receive
            self._push(queue, stored)
        return [ReceivedMessage(s.message_id, s.receipt_handle, s.body,
                                _wanted(s.attributes, attribute_names),
                                s.receive_count, s.group_id, now - s.first_received_at) for s in delivered]

    def _deliver(self, queue: _Queue, stored: _Stored, timeout: int, now: float) -> bool:
        """Deliver a message (True), or dead-letter it once received ``max_receive_count`` times."""
        if queue.dead_letter_queue and queue.max_receive_count \
                and stored.receive_count >= queue.max_receive_count:
            self._dead_letter(queue, stored)
            return False
        stored.receive_count += 1
        if stored.receive_count == 1:
            stored.first_received_at = now
        # A new receipt handle: the message id and a number never used before.
        stored.receipt_handle = '%s.%032x' % (stored.message_id, next(_nonces))
        stored.visible_at = now + timeout
        stored.version += 1
        stored.in_flight = next(self._flights)
        return True

    def _take_fifo(self, queue: _Queue, max_messages: int, timeout: int, now: float) -> list[_Stored]:
        """The first visible messages in send order, of groups with none in flight."""
        blocked = {s.group_id for s in queue.messages.values() if s.receipt_handle and s.visible_at > now}

        def held(stored: _Stored) -> bool:
            if stored.visible_at > now:             # held: the rest of its group waits
                blocked.add(stored.group_id)
            return stored.group_id in blocked
        return self._in_send_order(queue, max_messages, timeout, now, held, set())

    def _take_localstack(self, queue: _Queue, max_messages: int, timeout: int, now: float) -> list[_Stored]:
        """LocalStack's FIFO receive: the messages whose timeout ended put back
        in receive order up to the first one still invisible, then the first
        messages not in flight, in send order, of groups not blocked (a receive
        blocks the groups it took)."""
        for stored in sorted((s for s in queue.messages.values() if s.in_flight), key=lambda s: s.in_flight):
            if stored.visible_at > now:
                break
            self._put_back(queue, stored)
        taken: set[str] = set()

        def held(stored: _Stored) -> bool:
            return bool(stored.in_flight) or stored.visible_at > now \
                or (stored.group_id in queue.blocked and stored.group_id not in taken)
        delivered = self._in_send_order(queue, max_messages, timeout, now, held, taken)
        queue.blocked |= taken
        return delivered

    def _in_send_order(self, queue: _Queue, max_messages: int, timeout: int, now: float,
                       held: Callable[[_Stored], bool], taken: set[str]) -> list[_Stored]:
        """The first messages not ``held`` in send order, delivered; their groups added to ``taken``."""
        delivered: list[_Stored] = []
        for stored in list(queue.messages.values()):
            if len(delivered) == max_messages:
                break
            if not held(stored) and self._deliver(queue, stored, timeout, now):
                delivered.append(stored)
                taken.add(stored.group_id)
        return delivered

    @staticmethod
    def _put_back(queue: _Queue, stored: _Stored) -> None:
        """``localstack_fifo``: a message in flight is no longer, and unblocks its group."""
        stored.in_flight = 0
        queue.blocked.discard(stored.group_id)

    def _take_standard(self, queue: _Queue, max_messages: int, timeout: int, now: float) -> list[_Stored]:
        delivered: list[_Stored] = []
        while queue.heap and len(delivered) < max_messages and queue.heap[0][0] <= now:
            _, _, message_id, version = heapq.heappop(queue.heap)
            stored = queue.messages.get(message_id)
            if stored is None or stored.version != version:
                continue
            if self._deliver(queue, stored, timeout, now):
                delivered.append(stored)
        return delivered

    def _dead_letter(self, queue: _Queue, stored: _Stored) -> None:
        """Move a message to the dead-letter queue with its id, sent_at, count and first receive."""
        del queue.messages[stored.message_id]
        self._add(self._queues[str(queue.dead_letter_queue)],
                  _Stored(stored.message_id, stored.body, stored.attributes, stored.sent_at,
                          self.clock.monotonic(), stored.receive_count, group_id=stored.group_id,
                          first_received_at=stored.first_received_at))

    def _settle(self, operation: str, queue: str, entries: Sequence[tuple[str, int]],
                settle: Callable[[_Queue, str, int], bool]) -> list[str]:
        """Settle (receipt handle, timeout) entries; the handles that failed."""
        failed: list[str] = []
        for start in range(0, len(entries), MAX_BATCH_ENTRIES):
            self._request(operation)
            with self._lock:
                target = self._queue(queue)
                failed.extend(handle for handle, timeout in entries[start:start + MAX_BATCH_ENTRIES]
                              if not settle(target, handle, timeout))
                self._lock.notify_all()
        return failed

    def _count_late(self, stored: _Stored, handle: str) -> None:
        if handle != stored.receipt_handle or stored.visible_at < self.clock.monotonic():
            self.late_settles += 1

    def delete_batch(self, queue: str, receipt_handles: Sequence[str]) -> list[str]:
        def delete(target: _Queue, handle: str, _: int) -> bool:
            message_id = _message_id(handle)
            if message_id is None:
                return False
            stored = target.messages.get(message_id)
            if stored is not None:
                self._count_late(stored, handle)
                if handle == stored.receipt_handle:    # a stale handle deletes nothing
                    del target.messages[message_id]
                    if self.localstack_fifo and target.fifo and not any(
                            s.in_flight and s.group_id == stored.group_id for s in target.messages.values()):
                        target.blocked.discard(stored.group_id)
            return True
        return self._settle('DeleteMessageBatch', queue, [(h, 0) for h in receipt_handles], delete)

    def change_visibility_batch(self, queue: str, changes: Sequence[VisibilityChange]) -> list[str]:
        def change(target: _Queue, handle: str, timeout: int) -> bool:
            stored = target.messages.get(_message_id(handle) or '')
            if stored is None or handle != stored.receipt_handle:
                return False
            self._count_late(stored, handle)
            if self.localstack_fifo and target.fifo:
                if not stored.in_flight:
                    return True         # put back already: LocalStack ignores the change
                if timeout == 0:
                    self._put_back(target, stored)
            stored.visible_at = self.clock.monotonic() + timeout
            stored.version += 1
            self._push(target, stored)
            return True
        return self._settle('ChangeMessageVisibilityBatch', queue,
                            [(c.receipt_handle, c.timeout_sec) for c in changes], change)
