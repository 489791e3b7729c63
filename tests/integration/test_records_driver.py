"""kale/store/sql/driver.py: every statement the store runs on the raw driver
gives what SQLAlchemy's own execution of the same statement gives, on SQLite
and PostgreSQL."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from kale import records
from kale.store.sql.driver import (
    POSTGRESQL_ROWS_PER_STATEMENT,
    SQLITE_MAX_ROWS,
    SQLITE_MAX_VARIABLES,
    all_cancelled_statement,
    cancelled_among_statement,
    event_statement,
    many_rows_sql,
    published_statement,
)
from kale.store.sql.schema import tasks

KEYS = ('id', 'task', 'queue', 'status', 'attempts', 'published_at', 'updated_at', 'labels')


def rows(prefix, count, status='queued', at=1000.0):
    return [{'id': '%s-%02d' % (prefix, i), 'task': 't.T', 'queue': 'default', 'status': status,
             'attempts': i % 3, 'published_at': at, 'updated_at': at + i,
             'labels': {'n': i}} for i in range(count)]


def table(store):
    with store.begin() as conn:
        return [dict(row) for row in conn.execute(select(tasks).order_by(tasks.c.id)).mappings()]


def by_sqlalchemy(store, statement, given):
    with store.begin(write=True) as conn:
        for row in given:            # one at a time, in order, as the driver applies them
            conn.execute(statement, row)


def twin_stores(any_records_url, tmp_path, request):
    """The store under test and an empty one of the same dialect."""
    first = records.store(any_records_url)
    first.migrate()
    if any_records_url.startswith('sqlite'):
        other = 'sqlite:///%s' % (tmp_path / 'sqlalchemy.db')
    else:
        other = request.getfixturevalue('postgres_cluster').new_database()
    second = records.store(other)
    second.migrate()
    return first, second


def test_writes_match_sqlalchemys_execution(any_records_url, tmp_path, request):
    driver_store, reference = twin_stores(any_records_url, tmp_path, request)
    published = rows('p', 70)
    newer = [dict(row, status='running', updated_at=5000.0) for row in published[:40]]
    older = [dict(row, status='succeeded', updated_at=10.0) for row in published[:20]]
    for store in (driver_store, reference):
        dialect = store.engine.dialect.name
        if store is driver_store:
            store.write(published, [], [])
            store.write([], newer + older, [], attempt_rows=[])
        else:
            by_sqlalchemy(store, published_statement(dialect), published)
            by_sqlalchemy(store, event_statement(dialect), newer + older)
    assert table(driver_store) == table(reference)
    assert {row['status'] for row in table(driver_store)[:40]} == {'running'}   # newest won


def test_the_many_row_insert_is_sqlalchemys_own(any_records_url):
    store = records.store(any_records_url)
    for kind, build in (('published', published_statement), ('event', event_statement)):
        statement = store.driver.write(kind, KEYS)
        if store.driver.name != 'sqlite':       # rows as JSON, the rest SQLAlchemy's
            assert statement.rows_per_statement == POSTGRESQL_ROWS_PER_STATEMENT
            sql, [document] = statement.many([{'id': 'x'}])
            assert 'json_to_recordset' in sql and json.loads(document)[0]['id'] == 'x'
            assert sql.endswith(statement.sql.split(') ON CONFLICT ', 1)[1])
            continue
        assert statement.rows_per_statement == min(SQLITE_MAX_ROWS, SQLITE_MAX_VARIABLES
                                                   // len(statement.names))
        for count in (1, 2, 5, 17):
            assert statement.multirow_sql(count) == many_rows_sql(
                build('sqlite'), KEYS, store.engine.dialect, count)


def test_cancellation_queries_match_sqlalchemys_execution(any_records_url):
    store = records.store(any_records_url)
    store.migrate()
    store.write(rows('c', 6, status='cancelled') + rows('q', 4), [], [])
    asked = ['c-01', 'q-02', 'c-04', 'nobody']
    with store.begin() as conn:
        if store.driver.name == 'postgresql':
            expected = conn.execute(cancelled_among_statement('postgresql', 0),
                                    {'status': 'cancelled', 'ids': asked})
        else:
            expected = conn.execute(cancelled_among_statement('sqlite', len(asked)),
                                    dict({'status': 'cancelled'},
                                         **{'id%d' % i: v for i, v in enumerate(asked)}))
        expected = {row[0] for row in expected}
        limited = {row[0] for row in conn.execute(all_cancelled_statement(),
                                                   {'status': 'cancelled', 'limit': 3})}
    assert store.cancelled_among(asked) == expected == {'c-01', 'c-04'}
    assert len(store._all_cancelled(3)) == 3 and len(limited) == 3
    assert set(store._all_cancelled(100)) == {'c-%02d' % i for i in range(6)}


events = st.lists(st.tuples(st.sampled_from(['a', 'b', 'c']),
                            st.sampled_from(['running', 'succeeded', 'scheduled', 'failed']),
                            st.integers(0, 50)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=events, chunks=st.integers(1, 4))
def test_the_newest_event_wins_whatever_the_order_and_the_writes(any_records_url, events, chunks):
    """Property: after any events, in any order, split over any number of
    writes, each row holds the event with the greatest updated_at (the last
    written among equals)."""
    store = records.store(any_records_url)
    store.migrate()
    with store.begin(write=True) as conn:
        conn.execute(tasks.delete())
    given = [{'id': task_id, 'task': 't.T', 'queue': 'default', 'status': status,
              'attempts': 1, 'published_at': 0.0, 'updated_at': float(at)}
             for task_id, status, at in events]
    size = -(-len(given) // chunks)
    for start in range(0, len(given), size):
        store.write([], given[start:start + size], [], attempt_rows=[])
    newest = {}
    for row in given:
        if row['id'] not in newest or row['updated_at'] >= newest[row['id']]['updated_at']:
            newest[row['id']] = row
    found = {row['id']: (row['status'], row['updated_at']) for row in table(store)}
    assert found == {task_id: (row['status'], row['updated_at'])
                     for task_id, row in newest.items()}


@pytest.mark.parametrize('count', [1, 3])
def test_statements_carry_no_values_of_their_own(count):
    from sqlalchemy.dialects import sqlite
    sql = many_rows_sql(event_statement('sqlite'), ('id', 'status'), sqlite.dialect(), count)
    assert sql.count('(?, ?') == count and "'" not in sql.split('ON CONFLICT')[0]
