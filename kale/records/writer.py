"""The writer: one thread per process that writes records, off the task's
path, in gathered transactions keeping each task's newest event, buffering
(bounded) while the store is down. How: docs/explanation/internals-records.md."""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Hashable, NamedTuple, Optional, Sequence, Union

from kale.retry import Backoff

logger = logging.getLogger(__name__)

MAX_BACKOFF_SEC = 5.0
#: Longest time the thread sleeps when it has nothing to write.
IDLE_WAKE_SEC = 1.0
#: Seconds between two log lines about dropped rows or an outage.
LOG_EVERY_SEC = 30.0
#: Longest time rows wait for others to share their transaction.
GATHER_SEC = 0.1
#: Rows that are written at once, without waiting for more.
GATHER_ROWS = 1000

Row = dict[str, Any]
#: store.write(published, events, worker_rows[, attempt_rows])
WriteFunction = Callable[..., None]


class LaterRow(NamedTuple):
    """An event whose row the writer thread builds, ``build(*args)``, unless a
    newer event of the same task (``id``) came in meanwhile."""

    id: str
    updated_at: float
    build: Callable[..., Row]
    args: tuple
    #: The event ends an attempt that is retried: its row is also history
    #: (``RecordWriter.history``), built even when a newer one came in.
    ends_attempt: bool = False


class RecordWriter:
    """Buffers rows and writes them on its own thread."""

    def __init__(self, write: WriteFunction, max_rows: int = 10000,
                 periodic: Optional[Callable[[], list[Row]]] = None,
                 name: str = 'kale-records', gather_sec: float = GATHER_SEC,
                 history: Optional[Callable[[Sequence[Row]], list[Row]]] = None):
        self._write = write
        #: Rows of history (attempts) from the events handed over, before newer
        #: events merge them away: ``write``'s fourth argument.
        self.history = history
        self.max_rows = max_rows
        self.gather_sec = gather_sec
        #: Called on the thread before each write and at least every second:
        #: worker rows to write (a heartbeat); may do other chores.
        self.periodic = periodic
        self._published: collections.deque[Row] = collections.deque()
        self._events: collections.deque[Union[Row, LaterRow]] = collections.deque()
        #: The running tasks' events by key (:meth:`running`), set without the
        #: lock; each taken into ``_events`` once, by the thread or by flush.
        self._current: dict[Hashable, LaterRow] = {}
        self._current_taken: dict[Hashable, LaterRow] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._written = threading.Condition(self._lock)
        self._cycles = 0             # rounds of the thread that ended well
        self._put_count = 0          # rows handed over so far
        self._done_count = 0         # rows written or dropped so far
        self.dropped = 0
        self.written = 0
        self.failures = 0
        self._down_since: Optional[float] = None
        self._last_log = 0.0
        self._stopping = False
        self._idle = False           # the thread waits for rows: wake it on the next put
        self._flushing = 0           # callers waiting in flush: write without gathering
        #: time.time() of the last write that carried rows (0: none yet)
        self.last_written_at = 0.0
        self._stop = threading.Event()      # cuts an outage's pause short
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- handing rows over (any thread) -----------------------------------------

    def publish(self, rows: list[Row]) -> None:
        """Rows of one publish or publish_batch."""
        self._put(self._published, rows)

    def event(self, rows: Sequence[Union[Row, LaterRow]]) -> None:
        """Task transitions (a batch's outcomes): rows, or LaterRows."""
        self._put(self._events, rows)

    def running(self, key: Hashable, later: Optional[LaterRow]) -> None:
        """The event of a task this process runs now, under ``key`` (None: the
        run ended), written once at the next round or flush if it still runs.
        Takes no lock: cheap enough to call around every run."""
        if later is None:
            self._current.pop(key, None)
            self._current_taken.pop(key, None)
            return
        self._current[key] = later
        if self._idle:
            with self._lock:
                self._wake.notify()

    def _take_current(self) -> None:
        """(Under the lock.) Hand over the running tasks' events, each once."""
        taken = self._current_taken
        for key, current in list(self._current.items()):
            if taken.get(key) is not current:
                taken[key] = current
                self._events.append(current)
                self._put_count += 1
        self._bound()

    def _current_waits(self) -> bool:
        taken = self._current_taken
        return any(taken.get(key) is not current for key, current in list(self._current.items()))

    def _put(self, target: collections.deque[Any], rows: Sequence[Any]) -> None:
        with self._lock:
            target.extend(rows)
            self._put_count += len(rows)
            held = self._bound()
            if self._idle or held >= GATHER_ROWS:
                self._wake.notify()

    def _bound(self) -> int:
        """(Under the lock.) Drop what exceeds ``max_rows``; the rows held."""
        held = len(self._published) + len(self._events)
        if held > self.max_rows:
            self._drop(held - self.max_rows)
        return held

    def _drop(self, count: int) -> None:
        """(Under the lock.) Drop the oldest rows, events first: later ones carry their tasks further."""
        for source in (self._events, self._published):
            while count and source:
                source.popleft()
                count -= 1
                self.dropped += 1
                self._done_count += 1
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_SEC:
            self._last_log = now
            logger.error('records: buffer of %d rows is full (store %s); %d rows dropped so '
                         'far', self.max_rows, 'down' if self._down_since else 'slow',
                         self.dropped)

    @property
    def down(self) -> bool:
        """Whether the last write failed (the store is down or refusing)."""
        return self._down_since is not None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._published) + len(self._events)

    def flush(self, timeout: float = 5.0, periodic: bool = False) -> bool:
        """Wait until every row handed over so far is written (or dropped), with
        ``periodic`` until it ran and its rows were written too; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._take_current()
            target = self._put_count
            cycle = self._cycles + (2 if periodic else 0)
            self._flushing += 1
            try:
                while self._done_count < target or self._cycles < cycle:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._wake.notify()
                    self._written.wait(min(left, 0.05))
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Write what is buffered (waiting up to ``timeout``), then stop."""
        flushed = self.flush(timeout)
        with self._lock:
            self._stopping = True
            self._wake.notify()
        self._stop.set()
        self._thread.join(1.0)
        if not flushed:
            logger.error('records: %d rows could not be written before exit', self.pending)
        return flushed

    # --- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(initial=0.1, maximum=MAX_BACKOFF_SEC)
        while True:
            taken = self._take()
            if taken is None:
                return
            published, handed = taken
            events = newest_events(handed)      # rows built here, not under the lock
            if len(events) < len(handed):
                with self._lock:
                    self._done_count += len(handed) - len(events)      # merged away
            worker_rows = self._periodic()
            if not (published or events or worker_rows):
                self._cycle_ended(0)
                continue
            try:
                self._write(published, events, worker_rows, *self._histories(handed))
            except Exception as exc:
                self._put_back(published, events)
                self._failed(exc, backoff)
                continue
            backoff.reset()
            self._cycle_ended(len(published) + len(events))

    def _take(self) -> Optional[tuple[list[Row], list[Any]]]:
        """Wait for rows, let them gather, then take them all (None once stopping)."""
        with self._lock:
            # Idle is set before looking: a running() after the look sees it
            # and wakes the thread.
            self._idle = True
            if not (self._published or self._events or self._stopping
                    or self._current_waits()):
                self._wake.wait(IDLE_WAKE_SEC)
            self._idle = False
            self._gather()
            self._take_current()
            if self._stopping:
                return None
            published, handed = list(self._published), list(self._events)
            self._published.clear()
            self._events.clear()
            return published, handed

    def _histories(self, handed: list[Any]) -> tuple[Any, ...]:
        """The history rows of the events that end an attempt (() when none is kept)."""
        if self.history is None:
            return ()
        return (self.history([event.build(*event.args) if isinstance(event, LaterRow)
                              else event for event in handed
                              if not isinstance(event, LaterRow) or event.ends_attempt]),)

    def _gather(self) -> None:
        """(Under the lock.) Let rows gather up to ``gather_sec``; a flush, a stop or GATHER_ROWS cut it."""
        deadline = time.monotonic() + self.gather_sec
        while (self._published or self._events or self._current_waits()) \
                and not (self._stopping or self._flushing):
            left = deadline - time.monotonic()
            if left <= 0 or len(self._published) + len(self._events) >= GATHER_ROWS:
                return
            self._wake.wait(left)

    def _periodic(self) -> list[Row]:
        if self.periodic is None:
            return []
        try:
            return self.periodic()
        except Exception:
            logger.exception('records: periodic chore failed')
            return []

    def _cycle_ended(self, count: int) -> None:
        with self._lock:
            self._cycles += 1
            self._done_count += count
            self.written += count
            if count:
                self.last_written_at = time.time()
            self._written.notify_all()
        if self._down_since is not None and count:
            logger.warning('records: store reachable again after %.1fs; caught up with %d rows',
                           time.monotonic() - self._down_since, count)
            self._down_since = None

    def _put_back(self, published: list[Row], events: list[Row]) -> None:
        """Rows whose write failed go back in front of those handed over since."""
        with self._lock:
            self._published.extendleft(reversed(published))
            self._events.extendleft(reversed(events))
            self._bound()

    def _failed(self, exc: Exception, backoff: Backoff) -> None:
        self.failures += 1
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        delay = backoff.next_delay()
        if now - self._last_log >= LOG_EVERY_SEC or self.failures == 1:
            self._last_log = now
            logger.warning('records: writing %d rows failed, retrying in %.1fs: %s',
                           self.pending, delay, str(exc).splitlines()[0] if str(exc) else exc)
        self._stop.wait(delay)


def newest_events(events: Sequence[Union[Row, LaterRow]]) -> list[Row]:
    """The newest event of each task (each is a whole snapshot of the worker
    columns), in order; a :class:`LaterRow` is built only when it is the newest."""
    newest: dict[Any, tuple[float, Union[Row, LaterRow]]] = {}
    key: Any
    for event in events:
        if isinstance(event, LaterRow):
            key, at = event.id, event.updated_at
        else:
            key, at = event.get('id'), event.get('updated_at') or 0
        found = newest.get(key)
        if found is None or at >= found[0]:
            newest[key] = (at, event)
    return [event.build(*event.args) if isinstance(event, LaterRow) else event
            for _, event in newest.values()]
