"""The relay: sends what committed into ``kale_outbox``, then deletes it.

Each round claims up to ``BATCH`` rows in one transaction, sends them with
SendMessageBatch (in insertion order, queue by queue), deletes them and
commits, then writes their tasks' ``queued`` records when records are on. A relay
killed between the send and the commit sends those rows again, with the same
task ids: delivery is at least once, and a worker with records on skips a
task that already succeeded.

- PostgreSQL: any number of relays. Rows are claimed ``FOR UPDATE SKIP
  LOCKED``, so two healthy relays never send one row; rows of FIFO groups are
  sent only by the relay holding an advisory lock, in insertion order. A
  relay wakes on ``NOTIFY kale_outbox`` and also polls every
  ``OUTBOX_POLL_SEC`` for anything it missed.
- SQLite: one relay per database, held by a lock on a file beside it; a
  second relay says so and exits. It polls every ``OUTBOX_POLL_SEC``.

An outage of SQS or of the database makes the relay back off (doubling up
to ``MAX_BACKOFF_SEC``) and try again: nothing is lost. It also purges
``kale_consumed`` rows older than ``CONSUMED_TTL_SEC``.
"""
from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import threading
from typing import Any, Callable, Optional

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from kale.broker import Broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import KaleError, OutboxError
from kale.outbox.schema import CHANNEL, consumed, init, outbox
from kale.transport import OutgoingMessage

logger = logging.getLogger(__name__)

#: Rows claimed per round.
BATCH = 100
#: Longest pause after failures.
MAX_BACKOFF_SEC = 30.0
#: Seconds between purges of old kale_consumed rows.
PURGE_EVERY_SEC = 600.0
#: The advisory lock of the relay that sends FIFO rows ('kalf').
FIFO_LOCK = 0x6B616C66


@dataclasses.dataclass
class Counts:
    """What a relay did, for its metrics and its log."""

    sent: int = 0
    rounds: int = 0
    failures: int = 0


class Relay:
    """Sends the outbox of one database (``OUTBOX_URL``) to SQS."""

    def __init__(self, engine: Engine, broker: Broker, poll_sec: float = 1.0,
                 consumed_ttl_sec: Optional[float] = 15 * 24 * 3600, clock: Clock = SYSTEM_CLOCK,
                 write_records: Optional[Callable[[list[dict[str, Any]]], None]] = None,
                 claim_unique: Optional[Callable[..., list[str]]] = None):
        self.engine = engine
        self.broker = broker
        self.poll_sec = poll_sec
        self.consumed_ttl_sec = consumed_ttl_sec
        self.clock = clock
        self.write_records = write_records
        #: The records' claim of unique keys (RecordStore.claim_unique).
        self.claim_unique = claim_unique
        self.counts = Counts()
        self.postgres = engine.dialect.name == 'postgresql'
        self._lock_file: Optional[int] = None
        self._last_purge = 0.0
        self._wake = threading.Event()

    # --- one round --------------------------------------------------------------------

    def send_round(self) -> int:
        """Claim, send, delete and record up to BATCH rows; how many were sent."""
        if self.postgres:        # claimed rows stay locked until the delete commits
            with self.engine.begin() as conn:
                rows = self._claim(conn)
                if not rows:
                    return 0
                records = self._send(rows)
                conn.execute(delete(outbox).where(outbox.c.id.in_([row.id for row in rows])))
        else:                    # one relay per database: read, send, then delete
            with self.engine.connect().execution_options(kale_read=True) as conn, conn.begin():
                rows = self._claim(conn)
            if not rows:
                return 0
            records = self._send(rows)
            with self.engine.begin() as conn:
                conn.execute(delete(outbox).where(outbox.c.id.in_([row.id for row in rows])))
        self.counts.sent += len(rows)
        # After the commit: the records may live in this very database (on
        # SQLite, one writer at a time). A relay that dies here leaves the
        # tasks without their queued record; a worker's first event writes it.
        if records and self.write_records is not None:
            self.write_records(records)
        return len(rows)

    def _send(self, rows: list[Any]) -> list[dict[str, Any]]:
        """Send the rows (but those of unique tasks already held), in order,
        queue by queue; the records to write."""
        records, held = self._unique(rows)
        by_queue: dict[str, list[Any]] = {}
        for row in rows:
            if row.id not in held:
                by_queue.setdefault(row.queue, []).append(row)
        for queue_name, queued in by_queue.items():
            queue = self.broker.queues.get_queue(queue_name)
            outgoing = [OutgoingMessage(row.body, dict(row.attributes or {}), row.delay_sec,
                                        row.group_id or '', row.dedup_id or '')
                        for row in queued]
            message_ids = self.broker.send(queue, outgoing)
            for row, message_id in zip(queued, message_ids, strict=False):
                if row.record:
                    records.append(dict(row.record, message_id=message_id))
        return records

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
                    records.append(dict(row.record, status='deduplicated', duplicate_of=holder,
                                        finished_at=now, updated_at=now))
        return records, held

    def _claim(self, conn: Any) -> list[Any]:
        query = select(outbox).order_by(outbox.c.id).limit(BATCH)
        if not self.postgres:
            return list(conn.execute(query).all())
        rows = list(conn.execute(query.where(outbox.c.group_id.is_(None))
                                 .with_for_update(skip_locked=True)).all())
        if len(rows) < BATCH and conn.exec_driver_sql(
                'SELECT pg_try_advisory_xact_lock(%d)' % FIFO_LOCK).scalar():
            rows += conn.execute(query.where(outbox.c.group_id.is_not(None))
                                 .limit(BATCH - len(rows)).with_for_update()).all()
        return rows

    def pending(self) -> tuple[int, Optional[float]]:
        """Rows waiting, and the age in seconds of the oldest."""
        return pending(self.engine, self.clock.time())

    def purge_consumed(self) -> int:
        if self.consumed_ttl_sec is None:
            return 0
        with self.engine.begin() as conn:
            return int(conn.execute(delete(consumed).where(
                consumed.c.consumed_at < self.clock.time() - self.consumed_ttl_sec)).rowcount or 0)

    # --- the loop ---------------------------------------------------------------------

    def claim_database(self) -> None:
        """Check the tables, and on SQLite take the one relay's lock
        (OutboxError when another relay holds it)."""
        init(self.engine)
        if self.postgres:
            return
        database = self.engine.url.database
        if not database or database == ':memory:':
            return
        path = os.path.abspath(database) + '-kale-relay.lock'
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            raise OutboxError('another relay already sends the outbox of %s: SQLite allows one '
                              'relay per database (use PostgreSQL for several)' % database) \
                from None
        self._lock_file = handle

    def run(self, stop: threading.Event, until_empty: bool = False) -> None:
        """Send until ``stop`` is set (or, ``until_empty``, until a round finds nothing)."""
        self.claim_database()
        listener = _Listener(self.engine, self._wake) if self.postgres else None
        backoff = 0.0
        try:
            while not stop.is_set():
                try:
                    sent = self.send_round()
                    self._maybe_purge()
                    backoff = 0.0
                except (KaleError, SQLAlchemyError) as exc:
                    self.counts.failures += 1
                    backoff = min(MAX_BACKOFF_SEC, max(0.5, backoff * 2))
                    logger.warning('outbox relay: %s; trying again in %.1fs',
                                   str(exc).splitlines()[0], backoff)
                    stop.wait(backoff)
                    continue
                self.counts.rounds += 1
                if sent >= BATCH:
                    continue
                if until_empty and sent == 0:
                    return
                if sent == 0:
                    self._wake.wait(self.poll_sec)
                    self._wake.clear()
        finally:
            if listener is not None:
                listener.close()
            if self._lock_file is not None:
                os.close(self._lock_file)
                self._lock_file = None

    def _maybe_purge(self) -> None:
        now = self.clock.monotonic()
        if now - self._last_purge >= PURGE_EVERY_SEC:
            self._last_purge = now
            purged = self.purge_consumed()
            if purged:
                logger.info('outbox relay: purged %d consumed task ids', purged)

    def wake(self) -> None:
        self._wake.set()


def pending(engine: Engine, now: float) -> tuple[int, Optional[float]]:
    """Rows of the outbox waiting to be sent, and the age in seconds of the oldest."""
    with engine.connect().execution_options(kale_read=True) as conn, conn.begin():
        count, oldest = conn.execute(select(func.count(), func.min(outbox.c.created_at))).one()
    return int(count), (now - oldest) if oldest is not None else None


def with_records(url: Optional[str] = None) -> dict[str, Any]:
    """A Relay's ``write_records`` and ``claim_unique`` on the task records of
    ``url`` (default RECORDS_URL); none when records are off."""
    from kale.conf import settings
    url = url or settings.RECORDS_URL
    if not url:
        return {}
    from kale.records.recorder import get_recorder
    from kale.records.unique import claim_unique

    def write(rows: list[dict[str, Any]]) -> None:
        recorder = get_recorder(url)
        recorder.writer.publish(rows)
        recorder.flush(timeout=5.0)

    def claim(claims: Any, now: float, for_sec: float) -> list[str]:
        return claim_unique(get_recorder(url).store, claims, now, for_sec)
    return {'write_records': write, 'claim_unique': claim}


class _Listener:
    """LISTEN kale_outbox on a connection of its own, on a thread that sets
    ``wake`` at each notification."""

    def __init__(self, engine: Engine, wake: threading.Event):
        self.wake = wake
        self._closed = threading.Event()
        self._url = engine.url.set(drivername='postgresql').render_as_string(hide_password=False)
        self._thread = threading.Thread(target=self._run, name='kale-outbox-listen', daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True) as conn:
                    conn.execute('LISTEN %s' % CHANNEL)
                    self.wake.set()               # anything sent while not listening
                    while not self._closed.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.wake.set()
            except psycopg.Error as exc:
                logger.warning('outbox relay: LISTEN failed (%s); polling meanwhile',
                               str(exc).splitlines()[0])
                self._closed.wait(2.0)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
