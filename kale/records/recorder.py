"""This process's records: the store on RECORDS_URL, the writer thread, and
the row of this worker (or supervisor) process, with its periodic chores
(heartbeat, controls, purges). How: docs/explanation/internals-records.md."""
from __future__ import annotations

import atexit
import collections
import logging
import os
import random
import socket
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence

from kale.config import Config
from kale.events import process_identity
from kale.exceptions import ImproperlyConfigured
from kale.records.spool import Spool, default_directory
from kale.records.writer import LaterRow, RecordWriter, Row
from kale.store import Store, open_store, safe_url
from kale.store.records import retried_attempts
from kale.version import __version__

logger = logging.getLogger(__name__)

#: Seconds a process's row waits, at least, between two writes of what it runs.
ROW_REFRESH_SEC = 1.0
#: Seconds a stopping process waits for its records to be written.
EXIT_FLUSH_SEC = 5.0
#: Seconds between two foldings of the counters' changes by one writer.
ROLL_UP_SEC = 2.0
#: Seconds a read or a change of the records waits, at most, for what this
#: process handed its writer to be written first (a publisher reads and
#: cancels its own tasks): a bound for a store that does not answer.
OWN_WRITES_SEC = 15.0
#: Seconds between two reads of what operators asked of this process: with
#: the writer's round of at most a second, a pause or a stop is read within 3 s.
CONTROL_POLL_SEC = 2.0

#: What a process does with what it reads: (when a stop was asked, or None; the paused queues).
ControlCallback = Callable[[Optional[float], list[str]], None]


class ProcessRow:
    """The row of this worker or supervisor process, written by the writer thread."""

    def __init__(self, role: str, queues: Sequence[str], heartbeat_sec: float):
        self.id, self.started_at = process_identity()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.role = role
        self.queues = list(queues)
        self.heartbeat_sec = heartbeat_sec
        self.current: Optional[tuple[str, str]] = None       # (task id, task name)
        self.counts: collections.Counter[str] = collections.Counter()
        self.stopped_at: Optional[float] = None
        self.written_at = 0.0          # monotonic; 0: never
        self.dirty = True
        #: Told what operators ask of this process (None: it reads nothing).
        self.control: Optional[ControlCallback] = None
        self.control_at = 0.0          # monotonic time of the next read
        self.stop_asked = False

    def due(self, now: float) -> bool:
        if self.written_at == 0.0 or (self.stopped_at is not None and self.dirty):
            return True
        elapsed = now - self.written_at
        return elapsed >= self.heartbeat_sec or (self.dirty and elapsed >= ROW_REFRESH_SEC)

    def snapshot(self) -> Row:
        current = self.current
        return {'id': self.id, 'role': self.role, 'host': self.host, 'pid': self.pid,
                'queues': self.queues, 'version': __version__, 'started_at': self.started_at,
                'heartbeat_at': time.time(), 'heartbeat_sec': self.heartbeat_sec,
                'stopped_at': self.stopped_at,
                'current_task': current[0] if current else None,
                'current_task_name': current[1] if current else None,
                'counts': dict(self.counts.copy())}


class Recorder:
    """The store, its writer and this process's row, under one app's records settings."""

    def __init__(self, config: Config):
        url = config.RECORDS_URL
        if not url:
            raise ImproperlyConfigured('task records are off: set RECORDS_URL (e.g. '
                                       "'sqlite:///kale-records.db')")
        self.url = url
        self.config = config
        self.store: Store = open_store(url, config)
        logger.debug('records: store %s', safe_url(url))
        self.pid = os.getpid()
        _live.add(self)
        self.max_value_chars = int(config.RECORDS_MAX_VALUE_CHARS)
        self.buffer_size = int(config.RECORDS_BUFFER_SIZE)
        self.heartbeat_sec = float(config.RECORDS_HEARTBEAT_SEC)
        #: How long a worker waits for a batch's outcomes to be written before
        #: it deletes their messages (0: not at all).
        self.settle_wait_sec = float(config.RECORDS_SETTLE_WAIT_SEC)
        #: Where outcomes the store could not take in time wait on disk.
        self.spool = Spool(config.RECORDS_SPOOL_DIR
                           or default_directory(url, self.store.database_file))
        self._next_replay = 0.0
        self.succeeded_ttl = config.RECORDS_SUCCEEDED_TTL_SEC
        self.failed_ttl = config.RECORDS_FAILED_TTL_SEC
        self.queued_ttl = config.RECORDS_QUEUED_TTL_SEC
        self.purge_interval = float(config.RECORDS_PURGE_INTERVAL_SEC)
        self.row: Optional[ProcessRow] = None
        self._writer: Optional[RecordWriter] = None
        self._lock = threading.Lock()
        self._next_purge: Optional[float] = None
        self._next_roll_up = 0.0
        self._rolled_at = 0               # the writer's ``written`` at the last roll-up
        self._cancel_failures = 0
        self._cancel_logged = 0.0

    @property
    def writer(self) -> RecordWriter:
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = RecordWriter(self.store.records.write, self.buffer_size,
                                                periodic=self._periodic,
                                                history=retried_attempts)
        return self._writer

    @property
    def last_written_at(self) -> float:
        """time.time() of this process's last write of task rows (0: none)."""
        return self._writer.last_written_at if self._writer is not None else 0.0

    # --- this process's row ---------------------------------------------------------

    def start_process(self, role: str, queues: Sequence[str], purges: bool,
                      control: Optional[ControlCallback] = None) -> ProcessRow:
        self.row = ProcessRow(role, queues, self.heartbeat_sec)
        self.row.control = control
        self.replay_spools()
        if purges:
            self._next_purge = time.monotonic() + random.uniform(0.1, 1.0) * self.purge_interval
        self.writer.event([])           # wakes the thread, which writes the row
        return self.row

    def stop_process(self) -> None:
        if self.row is not None:
            if self.row.stop_asked:
                row_id = self.row.id
                _guarded('cannot clear the stop asked of %s' % row_id,
                         lambda: self.store.controls.forget_stop(row_id))
            self.row.current = None
            self.row.stopped_at = time.time()
            self.row.dirty = True
        self._next_purge = None
        if self.flush(EXIT_FLUSH_SEC):
            self.spool.written()
            self.replay_spools()          # the last chance this process has

    def flush(self, timeout: float = EXIT_FLUSH_SEC) -> bool:
        """Write everything handed over so far (and this process's row)."""
        if self._writer is None:
            return True
        return self._writer.flush(timeout, periodic=self.row is not None and self.row.dirty)

    def flush_process(self, timeout: float = OWN_WRITES_SEC) -> bool:
        """Write what every recorder of this process on this URL holds (other
        apps' too: a read sees this process's writes)."""
        return all([recorder.flush(timeout) for recorder in list(_live)
                    if recorder.url == self.url and recorder.pid == os.getpid()])

    def keep_on_disk(self, later: Sequence[Any]) -> None:
        """Spool outcomes the store did not take in time (see :mod:`kale.records.spool`)."""
        rows = [self.store.sealer.stored(item.build(*item.args) if isinstance(item, LaterRow)
                                         else dict(item)) for item in later]
        try:
            self.spool.keep(rows)
        except OSError as exc:
            logger.error('records: %d outcomes could not be kept on disk (%s); a worker killed '
                         'before the store answers leaves their records behind', len(rows), exc)

    def replay_spools(self) -> None:
        """Write the spools of gone workers of this machine (see :mod:`kale.records.spool`)."""
        self._next_replay = time.monotonic() + SPOOL_REPLAY_SEC
        try:
            self.spool.replay(lambda rows: self.store.records.write([], rows, [], sealed=True))
        except OSError as exc:
            logger.warning('records: spools in %s cannot be read: %s', self.spool.directory, exc)

    def _periodic(self) -> list[Row]:
        """On the writer thread: the row when due, and a purge when due."""
        now = time.monotonic()
        if self.row is not None and now >= self._next_replay:
            self.replay_spools()
        if self._next_purge is not None and now >= self._next_purge:
            self._next_purge = now + self.purge_interval
            self._purge()
        self._roll_up(now)
        row = self.row
        if row is not None and row.control is not None and now >= row.control_at:
            row.control_at = now + CONTROL_POLL_SEC
            self._read_control(row)
        if row is None or not row.due(now):
            return []
        row.written_at, row.dirty = now, False
        return [row.snapshot()]

    def _purge(self) -> None:
        started = time.monotonic()
        purged = _guarded('purge failed', lambda: self.store.records.purge_expired(
            self.succeeded_ttl, self.failed_ttl, queued_ttl=self.queued_ttl))
        if purged:
            logger.info('records: purged %d expired task records in %.1fs', purged,
                        time.monotonic() - started)

    def _roll_up(self, now: float) -> None:
        """Fold the counters' changes every ROLL_UP_SEC, when this process wrote since the last time."""
        written = self._writer.written if self._writer is not None else 0
        if now < self._next_roll_up or written == self._rolled_at:
            return
        self._next_roll_up = now + ROLL_UP_SEC
        if _guarded('folding the counters failed', self.store.records.roll_up):
            self._rolled_at = written

    def _read_control(self, row: ProcessRow) -> None:
        """Tell the process what operators ask of it (a store that does not answer: next time)."""
        assert row.control is not None
        read = _guarded('cannot read the controls', lambda: self.store.controls.read(row.id),
                        logger.debug)
        if read is not None:
            row.stop_asked = row.stop_asked or read[0] is not None
            row.control(*read)

    # --- cancellations ------------------------------------------------------------

    def cancelled_among(self, task_ids: Sequence[str]) -> set[str]:
        """The cancelled ones among a batch's ids; none when the store fails
        (a worker never stops for its records)."""
        return self._among(self.store.records.cancelled_among, task_ids)

    def succeeded_among(self, task_ids: Sequence[str]) -> set[str]:
        """The ones among a batch's ids that already succeeded (none when the store fails)."""
        return self._among(self.store.records.succeeded_among, task_ids)

    def _among(self, ask: Callable[[Sequence[str]], set[str]],
               task_ids: Sequence[str]) -> set[str]:
        try:
            found = ask(task_ids)
        except Exception as exc:
            self._cancel_failures += 1
            now = time.monotonic()
            if now - self._cancel_logged >= 30.0:
                self._cancel_logged = now
                logger.warning('records: cannot check cancelled and finished tasks (%d checks so '
                               'far), running them: %s', self._cancel_failures, exc)
            return set()
        return found

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close(EXIT_FLUSH_SEC)
            self._writer = None


def _guarded(what: str, call: Callable[[], Any], log: Callable[..., None] = logger.warning) -> Any:
    """``call()``, or None when it fails, logged as ``records: what: the error``."""
    try:
        return call()
    except Exception as exc:
        log('records: %s: %s', what, exc)
        return None


#: Seconds between two looks for spools of gone workers.
SPOOL_REPLAY_SEC = 10.0

#: Every recorder of this process, to write their rows at exit (each app holds its own).
_live: 'weakref.WeakSet[Recorder]' = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    """A publisher that exits right after publishing still records its tasks."""
    for recorder in list(_live):
        if recorder.pid == os.getpid():
            recorder.close()


def reset_recorders() -> None:
    """Close every recorder of this process (tests switch RECORDS_URL)."""
    for recorder in list(_live):
        recorder.close()
        recorder.store.dispose()


__all__ = ['ProcessRow', 'Recorder', 'reset_recorders']
