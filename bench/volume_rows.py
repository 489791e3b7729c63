"""Many task records, fast, for the `records-volume` scenario: rows made in
Python and loaded with one multi-row ``executemany`` per chunk (SQLite) or
``COPY`` (PostgreSQL), the counters' triggers off while loading and the
counters counted once at the end (as the migration that brings them does).

The records look like a week of a fleet's work: 40 task names, 3 queues, 50
tenants (a label), published evenly over the last 7 days; 90 % succeeded, 5 %
failed, 2 % cancelled, 1 % each queued, scheduled and running. Their ids are
random, as Kale's are (``uuid4().hex``), and each has the id SQS gave its
message (a random UUID): so every new record lands at a random place of the
indexes on both, as it does in a store that has been in use for a week.
"""
from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any, Iterator

from kale.ids import random_id
from kale.store.sql import counters
from kale.store.sql.records import RecordStore

TASK_NAMES = ['app.jobs.Task%02d' % i for i in range(40)]
QUEUES = ['high_priority', 'default', 'low_priority']
TENANTS = ['t%02d' % i for i in range(50)]
WEEK_SEC = 7 * 24 * 3600
COLUMNS = ('id', 'task', 'queue', 'status', 'attempts', 'labels', 'inputs', 'published_at',
           'message_id', 'started_at', 'finished_at', 'next_attempt_at', 'duration_sec',
           'worker', 'error_type', 'error_message', 'updated_at')
#: (status, share of the rows in 1000ths)
MIX = [('succeeded', 900), ('failed', 50), ('cancelled', 20), ('queued', 10),
       ('scheduled', 10), ('running', 10)]
CHUNK = 20000


def statuses(rng: random.Random) -> Iterator[str]:
    table = [status for status, share in MIX for _ in range(share)]
    while True:
        yield table[rng.randrange(len(table))]


#: How the records' ids are made (``--volume-ids``): ``random`` as Kale makes
#: them (``uuid4().hex``), or ``ordered``, sorting by the time of their
#: publication (a ``make_task_id`` of one's own, a UUIDv7), which puts every
#: new record at the end of the index on them. Message ids are SQS's: random.
IDS = ('random', 'ordered')


def record_id(random_hex: str, at: float, ids: str = 'random') -> str:
    """A record's id (see IDS), from 32 random hex digits and its publication time."""
    return random_hex if ids == 'random' else '%012x%s' % (int(at * 1000), random_hex[12:])


def rows(n: int, now: float, seed: int = 48, ids: str = 'random') -> Iterator[tuple[Any, ...]]:
    """``n`` rows in COLUMNS order, published over the week before ``now``."""
    rng = random.Random(seed)
    status_of = statuses(rng)
    for i in range(n):
        published = now - WEEK_SEC + (i + rng.random()) * WEEK_SEC / n
        status = next(status_of)
        duration = round(rng.expovariate(4.0), 4)
        started = finished = next_at = None
        error = (None, None)
        if status not in ('queued', 'scheduled'):
            started = published + rng.uniform(0.01, 2.0)
        if status in ('succeeded', 'failed', 'cancelled'):
            finished = (started or published) + duration
        if status == 'failed':
            error = ('ValueError', 'bad input %d' % i)
        if status == 'scheduled':
            next_at = published + 60
        yield (record_id(uuid.UUID(int=rng.getrandbits(128)).hex, published, ids),
               TASK_NAMES[i % 40], QUEUES[i % 3],
               status, 1, json.dumps({'tenant': TENANTS[i % 50]}),
               json.dumps({'args': [i], 'kwargs': {}, 'exact': True}), published,
               str(uuid.UUID(int=rng.getrandbits(128), version=4)), started, finished,
               next_at, duration if finished else None,
               'host:%d@0' % (i % 8) if started else None, error[0], error[1],
               finished or started or published)


def load(store: RecordStore, n: int, now: float, ids: str = 'random') -> float:
    """Load ``n`` rows into the store's empty kale_tasks; the seconds it took."""
    started = time.monotonic()
    store.migrate()
    with store.begin(write=True) as conn:
        counters.drop_triggers(conn)
    made = rows(n, now, ids=ids)
    if store.dialect == 'postgresql':
        _copy(store, made)
    else:
        _insert(store, made, n)
    with store.begin(write=True) as conn:
        counters.recount(conn)
        counters.add_triggers(conn)
        if store.dialect == 'postgresql':       # as autovacuum would soon after
            conn.exec_driver_sql('ANALYZE')
    return time.monotonic() - started


def write_unfolded(store: RecordStore, n: int, now: float, seed: int,
                   ids: str = 'random') -> float:
    """Write ``n`` more rows (of ``seed``: other ids than the loaded ones'),
    as another program would while no Kale writer ran (a restore, a bulk
    import): the counters' triggers on and no fold, so that their changes
    wait in kale_task_changes for a reader. The seconds it took."""
    started = time.monotonic()
    made = rows(n, now, seed=seed, ids=ids)
    if store.dialect == 'postgresql':
        _copy(store, made)
    else:
        _insert(store, made, n)
    return time.monotonic() - started


def _insert(store: RecordStore, made: Iterator[tuple[Any, ...]], n: int) -> None:
    sql = 'INSERT INTO kale_tasks (%s) VALUES (%s)' % (', '.join(COLUMNS),
                                                        ', '.join('?' * len(COLUMNS)))
    for start in range(0, n, CHUNK):
        chunk = [next(made) for _ in range(min(CHUNK, n - start))]
        with store.begin(write=True) as conn:
            conn.connection.driver_connection.executemany(sql, chunk)  # type: ignore[union-attr]


def _copy(store: RecordStore, made: Iterator[tuple[Any, ...]]) -> None:
    with store.begin(write=True) as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor.copy('COPY kale_tasks (%s) FROM STDIN' % ', '.join(COLUMNS)) as copy:
            for row in made:
                copy.write_row(row)


#: Seconds between two of a writer's tasks (writer_rows).
TASK_SPACING_SEC = 0.001


def writer_rows(count: int, start: float, ids: str = 'random'
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A writer's rows for ``count`` tasks published from ``start`` on, one
    every TASK_SPACING_SEC: their publications and their outcomes (a running
    event merged away, as the writer does for short tasks). Ids made as
    ``ids`` says (IDS) and message ids as SQS gives them, random: each new
    row lands at a random place of the index on message ids (and, with
    Kale's ids, of the one on ids), as a real writer's do."""
    published, events = [], []
    for i in range(count):
        at = start + i * TASK_SPACING_SEC
        task_id = record_id(random_id(), at, ids)
        base = {'id': task_id, 'task': TASK_NAMES[i % 40], 'queue': QUEUES[i % 3]}
        published.append({**base, 'status': 'queued', 'attempts': 0,
                          'labels': {'tenant': TENANTS[i % 50]},
                          'inputs': {'args': [i], 'kwargs': {}, 'exact': True},
                          'published_at': at, 'message_id': str(uuid.uuid4()),
                          'updated_at': at})
        events.append({**base, 'status': 'succeeded', 'attempts': 1, 'published_at': at,
                       'started_at': at + 0.2, 'finished_at': at + 0.3, 'next_attempt_at': None,
                       'duration_sec': 0.1, 'worker': 'host:1@0', 'error_type': None,
                       'error_message': None, 'error_traceback': None,
                       'dead_letter_reason': None, 'result': None, 'stderr': None,
                       'updated_at': at + 0.3})
    return published, events
