"""The relay: sends what committed into ``kale_outbox``, then deletes it
(rounds, PostgreSQL and SQLite, at-least-once: docs/explanation/internals-workflow.md, "The relay")."""
from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from kale.broker import Broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.config import Config
from kale.exceptions import KaleError, OutboxError
from kale.outbox import proof
from kale.statuses import TaskStatus
from kale.store.outbox import OutboxRow, OutboxStore
from kale.store.sql.outbox import DATABASE_ERRORS, outbox_on
from kale.transport import MAX_DELAY_SEC, OutgoingMessage

if TYPE_CHECKING:
    from kale.app import App
    from kale.store.sql.outbox import Engine

logger = logging.getLogger(__name__)

#: Rows claimed per round.
BATCH = 100
#: Longest pause after failures.
MAX_BACKOFF_SEC = 30.0
#: Seconds between purges of old kale_consumed rows.
PURGE_EVERY_SEC = 600.0
#: Rounds running at once in one relay on PostgreSQL (a commit arriving while
#: one round waits on SQS is taken by another at once).
LOOPS = 2
#: SendMessageBatch requests of one round in flight at once.
SEND_THREADS = 8
#: Messages in one SendMessageBatch.
SEND_BATCH = 10


@dataclasses.dataclass
class Counts:
    """What a relay did, for its metrics and its log."""

    sent: int = 0
    rounds: int = 0
    failures: int = 0
    #: Rows set aside in kale_outbox_rejected: their publisher's MAC failed.
    rejected: int = 0


class Relay:
    """Sends the outbox of one database (``OUTBOX_URL``) to SQS."""

    def __init__(self, engine: Union['Engine', OutboxStore], broker: Broker,
                 poll_sec: float = 1.0,
                 consumed_ttl_sec: Optional[float] = 15 * 24 * 3600, clock: Clock = SYSTEM_CLOCK,
                 write_records: Optional[Callable[[list[dict[str, Any]]], None]] = None,
                 claim_unique: Optional[Callable[..., list[str]]] = None, *,
                 config: Config):
        #: The outbox's store: an OutboxStore, or the SQL one on an engine
        #: (:func:`kale.outbox.open_database`).
        self.store: OutboxStore = outbox_on(engine)
        #: Whose signing keys check the rows' MACs: the app's whose broker it is.
        self.config = config
        self.broker = broker
        self.poll_sec = poll_sec
        self.consumed_ttl_sec = consumed_ttl_sec
        self.clock = clock
        self.write_records = write_records
        #: The records' claim of unique keys (RecordStore.claim_unique).
        self.claim_unique = claim_unique
        self.counts = Counts()
        self._last_purge = 0.0
        self._wake = threading.Event()
        self._counting = threading.Lock()
        self._senders: Optional[ThreadPoolExecutor] = None
        self._fifo = any(broker.queues[name].fifo for name in broker.queues)

    def send_round(self) -> int:
        """Claim, check, send, delete and record up to BATCH rows; how many
        were sent (rows that fail their check are set aside instead). Rows
        claimed stay in the outbox when sending fails."""
        with self.store.claim(BATCH, self._fifo) as claim:
            if not claim.rows:
                return 0
            rows, rejected = self._checked(claim.rows)
            records = self._send(rows)
            claim.set_aside(rejected, self.clock.time())
        with self._counting:
            self.counts.sent += len(rows)
            self.counts.rejected += len(rejected)
        # After the commit: the records may live in this very database (on
        # SQLite, one writer at a time). A relay that dies here leaves the
        # tasks without their queued record; a worker's first event writes it.
        if records and self.write_records is not None:
            self.write_records(records)
        return len(rows)

    def _checked(self, rows: list[OutboxRow]
                 ) -> tuple[list[OutboxRow], list[tuple[OutboxRow, str]]]:
        """The rows whose publisher's MAC holds, and the others with why
        (:mod:`kale.outbox.proof`): the relay never signs what it reads."""
        good, rejected = [], []
        for row in rows:
            reason = proof.problem(self.config, row.fields())
            if reason is None:
                good.append(row)
            else:
                rejected.append((row, reason))
                logger.error('outbox relay: row %d (task %r) set aside in kale_outbox_rejected, '
                             'not sent: %s', row.id, str(row.task_id)[:128], reason)
        return good, rejected

    def _send(self, rows: list[Any]) -> list[dict[str, Any]]:
        """Send the rows (but those of unique tasks already held), in order,
        queue by queue; the records to write."""
        records, held = self._unique(rows)
        by_queue: dict[str, list[Any]] = {}
        for row in rows:
            if row.id not in held:
                by_queue.setdefault(row.queue, []).append(row)
        requests = []
        for queue_name, queued in by_queue.items():
            queue = self.broker.queues.get_queue(queue_name)
            step = len(queued) if queue.fifo else SEND_BATCH     # a FIFO queue: in order
            requests += [(queue, queued[start:start + step])
                         for start in range(0, len(queued), step)]
        for (_, sent), message_ids in zip(requests, self._send_requests(requests), strict=True):
            for row, message_id in zip(sent, message_ids, strict=False):
                if row.record:
                    records.append(dict(row.record, message_id=message_id))
        return records

    def _send_requests(self, requests: list[tuple[Any, list[Any]]]) -> list[list[str]]:
        """Send each (queue, rows), at once when there are several; the message
        ids of each. Every request is waited for before the first failure is
        raised (the round's rows are then all sent again)."""
        def send(queue: Any, rows: list[Any]) -> list[str]:
            # A longer wait is a due time in the signed body (kale.delays): SQS
            # takes 15 minutes at most, and workers send it on from there.
            return self.broker.send(queue, [
                OutgoingMessage(row.body, dict(row.attributes or {}),
                                min(row.delay_sec, MAX_DELAY_SEC),
                                row.group_id or '', row.dedup_id or '') for row in rows])
        if len(requests) == 1:
            return [send(*requests[0])]
        if self._senders is None:
            self._senders = ThreadPoolExecutor(SEND_THREADS, thread_name_prefix='kale-relay-send')
        futures = [self._senders.submit(send, queue, rows) for queue, rows in requests]
        wait(futures)
        return [future.result() for future in futures]

    def _unique(self, rows: list[Any]) -> tuple[list[dict[str, Any]], set[int]]:
        """Claim the keys of unique tasks: the ``deduplicated`` records of the
        rows whose key another task holds, and those rows' ids (not sent)."""
        unique = [row for row in rows if row.unique_key]
        if not unique:
            return [], set()
        if self.claim_unique is None:
            raise OutboxError('the outbox holds unique tasks (unique_for_sec), decided in the '
                              'task records: set RECORDS_URL for the relay')
        now = self.clock.time()
        records, held = [], set()
        for row in unique:
            [holder] = self.claim_unique([(row.unique_key, row.task_id)], now,
                                         row.unique_for_sec)
            if holder != row.task_id:
                held.add(row.id)
                if row.record:
                    records.append(dict(row.record, status=TaskStatus.DEDUPLICATED,
                                        duplicate_of=holder,
                                        finished_at=now, updated_at=now))
        return records, held

    def pending(self) -> tuple[int, Optional[float]]:
        """Rows waiting, and the age in seconds of the oldest."""
        return self.store.pending(self.clock.time())

    def claim_database(self) -> None:
        """Check the tables, and where a database allows one relay (SQLite)
        take its place (OutboxError when another relay holds it)."""
        self.store.init()
        self.store.hold()

    def run(self, stop: threading.Event, until_empty: bool = False) -> None:
        """Send until ``stop`` is set (or, ``until_empty``, until a round finds
        nothing), with LOOPS rounds at once on PostgreSQL."""
        self.claim_database()
        listener = self.store.listen(self._wake) if not until_empty else None
        others = [threading.Thread(target=self._loop, args=(stop, until_empty),
                                   name='kale-relay-%d' % number, daemon=True)
                  for number in range(1, LOOPS if self.store.concurrent else 1)]
        try:
            for thread in others:
                thread.start()
            self._loop(stop, until_empty)
            for thread in others:
                while thread.is_alive():
                    self._wake.set()          # a loop waiting for work sees stop
                    thread.join(0.1)
        finally:
            if listener is not None:
                listener.close()
            if self._senders is not None:
                self._senders.shutdown()
                self._senders = None
            self.store.let_go()

    def _loop(self, stop: threading.Event, until_empty: bool) -> None:
        backoff = 0.0
        while not stop.is_set():
            try:
                sent = self.send_round()
                self._maybe_purge()
                backoff = 0.0
            except (KaleError, *DATABASE_ERRORS) as exc:
                with self._counting:
                    self.counts.failures += 1
                backoff = min(MAX_BACKOFF_SEC, max(0.5, backoff * 2))
                logger.warning('outbox relay: %s; trying again in %.1fs',
                               str(exc).splitlines()[0], backoff)
                stop.wait(backoff)
                continue
            with self._counting:
                self.counts.rounds += 1
            if sent == 0:               # nothing to send: wait for a commit, or the next poll
                if until_empty:
                    return
                self._wake.wait(self.poll_sec)
                self._wake.clear()

    def _maybe_purge(self) -> None:
        now = self.clock.monotonic()
        with self._counting:
            if self.consumed_ttl_sec is None or now - self._last_purge < PURGE_EVERY_SEC:
                return
            self._last_purge = now
        purged = self.store.purge_consumed(self.clock.time() - self.consumed_ttl_sec)
        if purged:
            logger.info('outbox relay: purged %d consumed task ids', purged)

    def wake(self) -> None:
        self._wake.set()


def with_records(app: 'App') -> dict[str, Any]:
    """A Relay's ``write_records`` and ``claim_unique`` on ``app``'s task
    records; none when records are off."""
    if not app.config.RECORDS_URL:
        return {}

    def write(rows: list[dict[str, Any]]) -> None:
        # As the publisher made them (inputs MACed, values sealed), checked
        # with their row: written as they are, never signed here.
        app.store.records.write(rows, [], [], sealed=True)

    def claim(claims: Any, now: float, for_sec: float) -> list[str]:
        return app.store.unique.claim(claims, now, for_sec)
    return {'write_records': write, 'claim_unique': claim}
