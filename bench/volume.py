"""The records at volume: the `records-volume` scenario.

For each database (a fresh SQLite file, and a fresh database on a throwaway
PostgreSQL cluster, fsync and synchronous commit on), ``--rows`` records
(default 1,000,000) and :data:`SMALL_ROWS` records are loaded fast
(bench/volume_rows.py), and on each:

* every request the dashboard makes, and a few more of the API, is timed
  through ``kale web``'s application in this process (Starlette's test
  client: routing, the queries, JSON; no socket): the median of
  :data:`REPEATS` after one untimed;
* the writer's cost per task (a publication and an outcome written as the
  records writer writes them, in batches of :data:`BATCH`, with the fold of
  the counters' changes; the rows already signed, as the thread hands them
  over: the database's part, which the counters change) with the counters'
  triggers on, off, and today's writer (:data:`WRITER_MODES`), in rounds
  that take turns on the large store;
* the TTL purge of the records older than half the week (in chunks), with
  the longest a concurrent writer waited for the write lock meanwhile, and
  the longest its one-row write took; then the counters are compared with a
  scan;
* records written while no Kale writer ran (:data:`UNFOLDED_ROWS`, their
  changes not folded), on the small store: the summary, then the count,
  timed as it read before readers folded (adding every change), as the
  first read is now (it folds them) and folded.

Kale's column is the large store, the baseline's the small one (the writer:
counters on, or off, and today's writer; the purge: none).
"""
from __future__ import annotations

import contextlib
import statistics
import threading
import time
import uuid
from typing import Any, Iterator, Optional

from bench import volume_rows
from bench.environment import Environment
from bench.scenarios import Figures

SCENARIO = 'records-volume'
SMALL_ROWS = 10_000
REPEATS = 7
BATCH = 500
WRITER_TASKS = 5000
WRITER_ROUNDS = 9
TARGET_MS = 50.0
#: Records written while no Kale writer ran, at most (and at most --rows,
#: but twice the readers' bound at least, READ_FOLD_CHANGES): a database
#: restored or loaded by another program, 300,000 as in the report that
#: made readers fold.
UNFOLDED_ROWS = 300_000
#: The requests timed after such a write, and how.
UNFOLDED_REQUESTS = (('summary', '/api/tasks/summary'), ('count', '/api/tasks/count'))
UNFOLDED_READS = ('as read before readers folded', 'first (folds them)', 'folded')
TARGET_WRITER = 1.1
#: The dashboard's requests (its overview and its failures), then more of
#: the API. A name ending in '(scan)' reads the records themselves, not the
#: counters: it has no target.
REQUESTS: list[tuple[str, str]] = [
    ('summary', '/api/tasks/summary'),
    ('timeline', '/api/timeline?window=auto'),
    ('activity by queue (scan)', '/api/activity?by=queue&window=auto'),
    ('tasks list, failed', '/api/tasks?status=failed&limit=25'),
    ('count, failed', '/api/tasks/count?status=failed'),
    ('workers', '/api/workers'),
    ('tasks list', '/api/tasks?limit=50'),
    ('tasks list, task and status', '/api/tasks?task=Task07&status=succeeded&limit=25'),
    ('tasks list, label', '/api/tasks?label.tenant=t07&limit=25'),
    ('count', '/api/tasks/count'),
    ('count, queue', '/api/tasks/count?queue=default'),
    ('timeline, a day', '/api/timeline?window=86400'),
    ('one task', '/api/tasks/{id}'),
    ('count, label (scan)', '/api/tasks/count?label.tenant=t07'),
]


def request_figure(database: str, name: str) -> str:
    return 'volume %s: GET %s (ms)' % (database, name)


def writer_figure(database: str, mode: str = 'on') -> str:
    return "volume %s: writer per task, counters %s (today's writer) (µs)" % (database, mode)


def purge_figures(database: str) -> tuple[str, str, str, str]:
    return ('volume %s: TTL purge, rows deleted' % database,
            'volume %s: TTL purge in chunks (s)' % database,
            'volume %s: purge: longest wait for the write lock (ms)' % database,
            'volume %s: purge: longest one-row write meanwhile (ms)' % database)


def unfolded_figure(database: str, name: str, read: str) -> str:
    return 'volume %s: GET %s after rows no writer folded, %s (ms)' % (database, name, read)


def targets(databases: tuple[str, ...] = ('sqlite', 'postgres')) -> dict[str, tuple[str, Any]]:
    """Entries for bench.report.TARGETS."""
    found: dict[str, tuple[str, Any]] = {}
    for database in databases:
        for name, _ in REQUESTS:
            if not name.endswith('(scan)'):
                found[request_figure(database, name)] = ('< %g' % TARGET_MS,
                                                         lambda k, b: k < TARGET_MS)
        found[writer_figure(database)] = ("<= %g x today's" % TARGET_WRITER,
                                          lambda k, b: b is not None and k <= TARGET_WRITER * b)
    return found


def figures(env: Environment, rows: int, databases: tuple[str, ...], stores: Any,
            ids: str = 'random') -> Figures:
    """One run: every figure of every database (``ids``: volume_rows.IDS)."""
    found: Figures = {}
    for database in databases:
        if database == 'sqlite':
            found.update(_database(database, rows, _sqlite_url(env), _sqlite_url(env), ids))
        else:
            with stores.database(env) as big, stores.database(env) as small:
                found.update(_database(database, rows, big, small, ids))
    return found


def _sqlite_url(env: Environment) -> str:
    import os
    return 'sqlite:///%s' % os.path.join(env.workdir, 'volume-%s.db' % uuid.uuid4().hex[:8])


def _database(database: str, rows: int, big_url: str, small_url: str, ids: str) -> Figures:
    from kale.app import default_app
    from kale.store.sql.records import RecordStore
    config = default_app().config
    now = time.time()
    timed: dict[int, dict[str, float]] = {}
    stores = {}
    for size, url in ((rows, big_url), (SMALL_ROWS, small_url)):
        store = stores[size] = RecordStore(url, config)
        seconds = volume_rows.load(store, size, now, ids)
        _say('%s: %d records loaded in %.1fs' % (database, size, seconds))
        timed[size] = time_requests(url)
    found: Figures = {request_figure(database, name): (timed[rows][name], timed[SMALL_ROWS][name])
                      for name, _ in REQUESTS}
    writer = writer_cost(stores[rows], now, ids)
    for mode in ('on', 'off'):
        found[writer_figure(database, mode)] = (writer[mode], writer['today'])
    for figure, value in zip(purge_figures(database), purge(stores[rows], now), strict=True):
        found[figure] = (value, None)
    _say('%s: counters after the purge match a scan: %s' % (database, matches_scan(stores[rows])))
    from kale.store.sql.counters import READ_FOLD_CHANGES
    count = max(min(rows, UNFOLDED_ROWS), 2 * READ_FOLD_CHANGES)
    for name, reads in unfolded(stores[SMALL_ROWS], small_url, count, now, ids).items():
        for read, value in zip(UNFOLDED_READS, reads, strict=True):
            found[unfolded_figure(database, name, read)] = (value, None)
    for store in stores.values():
        store.dispose()
    return found


def time_requests(url: str) -> dict[str, float]:
    """The median milliseconds of each request of REQUESTS."""
    from starlette.testclient import TestClient

    from kale.web import create_app
    client = TestClient(create_app(records_url=url), base_url='http://127.0.0.1')
    some_id = client.get('/api/tasks?limit=1').json()['tasks'][0]['id']
    medians = {}
    for name, path in REQUESTS:
        path = path.replace('{id}', some_id)
        samples = []
        for number in range(REPEATS + 1):
            started = time.perf_counter()
            answer = client.get(path, headers={'X-Kale-Request': '1'})
            if number:
                samples.append((time.perf_counter() - started) * 1000)
            if answer.status_code != 200:
                raise RuntimeError('GET %s answered %d: %s' % (path, answer.status_code,
                                                              answer.text[:200]))
        medians[name] = statistics.median(samples)
    return medians


#: The writer's modes, in the order of its rounds: the counters on, off,
#: and today's writer (as before the counters: on PostgreSQL psycopg's
#: executemany, a statement a row; on SQLite 41 rows a statement and
#: SQLAlchemy's JSON processor; ``Driver(fast=False)``).
WRITER_MODES = ('on', 'off', 'today')


def _checkpoint(store: Any) -> None:
    """SQLite's log written back into the database: before a writer's round
    (untimed) and at its end (timed), so that each round pays for the
    checkpoints of its own writes, all of them (SQLite makes one at the
    commit that finds the log over a thousand pages: a round with the
    counters on would otherwise pay for its last writes' at its fold's
    commit, and a round without them leave them to the next)."""
    if store.engine.dialect.name == 'sqlite':
        with store.engine.connect() as conn:
            conn.exec_driver_sql('PRAGMA wal_checkpoint(TRUNCATE)')


def writer_cost(store: Any, now: float, ids: str = 'random') -> dict[str, float]:
    """Median µs per task of each of WRITER_MODES, in rounds that take turns:
    the database's part of the writer's work, which the counters change (its
    rows are given as the writer's thread hands them to the store, signed
    and sealed already)."""
    from kale.store.sql import counters
    from kale.store.sql.driver import Driver
    drivers = {True: store.driver, False: Driver(store.engine.dialect, fast=False)}
    costs: dict[str, list[float]] = {mode: [] for mode in WRITER_MODES}
    first = now + 60.0      # each round's tasks after the last round's, as a writer's are
    for driver in drivers.values():             # the statements compiled
        store.driver = driver
        published, events = volume_rows.writer_rows(BATCH, first, ids)
        first += BATCH * volume_rows.TASK_SPACING_SEC
        store.write(published, [], [], sealed=True)
        store.write([], events, [], sealed=True)
    for number in range(WRITER_ROUNDS * len(WRITER_MODES)):
        mode = WRITER_MODES[number % len(WRITER_MODES)]
        store.driver = drivers[mode != 'today']
        with store.begin(write=True) as conn:
            (counters.add_triggers if mode == 'on' else counters.drop_triggers)(conn)
        _checkpoint(store)
        published, events = volume_rows.writer_rows(WRITER_TASKS, first, ids)
        first += WRITER_TASKS * volume_rows.TASK_SPACING_SEC
        started = time.perf_counter()
        for start in range(0, WRITER_TASKS, BATCH):
            store.write(published[start:start + BATCH], [], [], sealed=True)
            store.write([], events[start:start + BATCH], [], sealed=True)
        if mode == 'on':
            store.roll_up()
        _checkpoint(store)          # what the round left in the log: its to pay, in every mode
        costs[mode].append((time.perf_counter() - started) / WRITER_TASKS * 1e6)
    store.driver = drivers[True]
    with store.begin(write=True) as conn:          # the rounds off were not counted
        counters.add_triggers(conn)
        counters.recount(conn)
    return {mode: statistics.median(found) for mode, found in costs.items()}


def purge(store: Any, now: float) -> tuple[float, float, float, float]:
    """(rows deleted, seconds, the longest a concurrent writer waited for the
    write lock meanwhile, and the longest its one-row write took, in ms) of
    the TTL purge of what finished over half a week ago. The write also pays
    SQLite's WAL checkpoints; on PostgreSQL nothing locks a new row."""
    longest = [0.0, 0.0]
    done = threading.Event()

    def write_meanwhile() -> None:
        while not done.is_set():
            started = time.perf_counter()
            with store.begin(write=True):
                longest[0] = max(longest[0], (time.perf_counter() - started) * 1000)
            published, _ = volume_rows.writer_rows(1, time.time())
            started = time.perf_counter()
            store.write(published, [], [])
            longest[1] = max(longest[1], (time.perf_counter() - started) * 1000)
            done.wait(0.05)
    store.write(volume_rows.writer_rows(1, now)[0], [], [])
    writer = threading.Thread(target=write_meanwhile, daemon=True)
    writer.start()
    ttl = volume_rows.WEEK_SEC / 2
    started = time.monotonic()
    try:
        deleted = store.purge_expired(ttl, ttl, now=now)
    finally:
        seconds = time.monotonic() - started
        done.set()
        writer.join()
    return float(deleted), seconds, longest[0], longest[1]


def unfolded(store: Any, url: str, count: int, now: float,
             ids: str = 'random') -> dict[str, tuple[float, float, float]]:
    """For each of UNFOLDED_REQUESTS in turn: ``count`` more records written
    while no Kale writer ran (their changes left unfolded), then the request
    through ``kale web``'s application, in ms: once as it read before the
    readers folded (adding every change), once as the first read is now
    (the fold of the changes, then the read), and folded (the median of
    REPEATS)."""
    from starlette.testclient import TestClient

    from kale.web import create_app
    client = TestClient(create_app(records_url=url), base_url='http://127.0.0.1')
    found = {}
    for number, (name, path) in enumerate(UNFOLDED_REQUESTS):
        seconds = volume_rows.write_unfolded(store, count, now, seed=100 + number, ids=ids)
        waiting = _waiting(store)
        with _readers_never_fold():
            before = _timed(client, path)
        first = _timed(client, path)
        _say('%s after %d records written in %.1fs while no writer ran: %d changes waiting, '
             '%d after the first read' % (name, count, seconds, waiting, _waiting(store)))
        folded = statistics.median(_timed(client, path) for _ in range(REPEATS))
        found[name] = (before, first, folded)
    return found


def _timed(client: Any, path: str) -> float:
    """One GET of ``path``, in ms (RuntimeError when it is not a 200)."""
    started = time.perf_counter()
    answer = client.get(path, headers={'X-Kale-Request': '1'})
    took = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError('GET %s answered %d: %s' % (path, answer.status_code,
                                                      answer.text[:200]))
    return took


def _waiting(store: Any) -> int:
    """The counters' changes not folded yet."""
    with store.begin() as conn:
        return int(conn.exec_driver_sql('SELECT count(*) FROM kale_task_changes').scalar() or 0)


@contextlib.contextmanager
def _readers_never_fold() -> Iterator[None]:
    """Reads as before readers folded: they add every change, however many
    (and do not count them first)."""
    from kale.store.sql import counters
    behind = counters.behind
    counters.behind = lambda conn: False
    try:
        yield
    finally:
        counters.behind = behind


def matches_scan(store: Any) -> bool:
    from kale.store.record import TaskFilter
    return bool(store.queries.summary(TaskFilter()) == store.queries.summary(
        TaskFilter(since=-1e12)))


def _say(text: str) -> None:
    import sys
    print('bench: records-volume: %s' % text, file=sys.stderr, flush=True)


def summary(configurations: list[dict[str, Any]], rows: int) -> Optional[str]:
    """The scenario's figures side by side: small store, large store, target."""
    lines = []
    for configuration in configurations:
        results = configuration['results']
        for figure, result in results.items():
            if not figure.startswith('volume '):
                continue
            kale, base = result['kale'], result['baseline']
            lines.append('%-72s | %12s | %12s | %s' % (
                figure, _value(base), _value(kale),
                '%s %s' % (result.get('target', ''), {True: 'met', False: 'NOT MET'}.get(
                    result.get('met'), '')) if 'target' in result else ''))
    if not lines:
        return None
    head = '%-72s | %12s | %12s | %s' % ('figure', '%d rows' % SMALL_ROWS, '%d rows' % rows,
                                         'target')
    return '\n'.join([head, '-' * len(head)] + lines)


def _value(result: Optional[dict[str, Any]]) -> str:
    if not result:
        return '-'
    value = result['median']
    return '%.1f' % value if value < 1000 else '%.0f' % value
