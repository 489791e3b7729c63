"""Every statement the records store hands straight to the database driver
(``published``, ``event``, ``cancelled_among``, ``all_cancelled``), built
with SQLAlchemy Core and compiled for the dialect once
(docs/explanation/internals-store.md, "Statements on the raw driver")."""
from __future__ import annotations

import json
import operator
import sqlite3
from typing import Any, Callable, Iterator, Sequence

import sqlalchemy
from sqlalchemy import and_, any_, bindparam, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from kale.statuses import FINAL_TASK, TaskStatus
from kale.store.records import EVENT_COLUMNS, PUBLISHED_COLUMNS
from kale.store.sql.schema import tasks

#: Bound variables one SQLite statement may have: 999 before SQLite 3.32,
#: 32766 since.
SQLITE_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
#: Rows one SQLite statement carries at most (measured: "Statements on the raw driver").
SQLITE_MAX_ROWS = 500


def insert_for(dialect_name: str) -> Callable[[Any], Any]:
    """The dialect's INSERT (both have ON CONFLICT)."""
    return postgresql.insert if dialect_name == 'postgresql' else sqlite.insert


def published_statement(dialect_name: str) -> Any:
    """Insert a publication; a row already there (a worker wrote first) gets
    the publisher's columns, and one of an earlier life of the id (a repeated
    make_task_id) that ended unsuccessfully starts again. A succeeded one stays:
    workers delete a delivery of a task that already succeeded unrun (a publish
    sent again because its answer was lost is that, not a new life)."""
    insert = insert_for(dialect_name)(tasks)
    finished = or_(*(tasks.c.status == sqlalchemy.literal_column("'%s'" % status)
                     for status in FINAL_TASK if status != TaskStatus.SUCCEEDED))  # no expanding IN here
    new_life = and_(finished, tasks.c.finished_at < insert.excluded.published_at)
    values: dict[str, Any] = {name: insert.excluded[name] for name in PUBLISHED_COLUMNS}
    for name in EVENT_COLUMNS:
        values[name] = sqlalchemy.case((new_life, insert.excluded[name]), else_=tasks.c[name])
    return insert.on_conflict_do_update(index_elements=[tasks.c.id], set_=values)


def event_statement(dialect_name: str) -> Any:
    """Insert or update a row from a worker's event, unless the row holds a
    newer one. Publisher-only columns are kept."""
    insert = insert_for(dialect_name)(tasks)
    values = {name: insert.excluded[name] for name in EVENT_COLUMNS}
    return insert.on_conflict_do_update(
        index_elements=[tasks.c.id], set_=values,
        where=tasks.c.updated_at <= insert.excluded.updated_at)


def cancelled_among_statement(dialect_name: str, count: int) -> Any:
    """Which of ``count`` ids (binds ``id0``.. on SQLite, the list ``ids`` on
    PostgreSQL) have the status ``status``."""
    query = select(tasks.c.id).where(tasks.c.status == bindparam('status'))
    if dialect_name == 'postgresql':
        return query.where(tasks.c.id == any_(bindparam('ids')))
    return query.where(tasks.c.id.in_([bindparam('id%d' % i) for i in range(count)]))


def all_cancelled_statement() -> Any:
    """Up to ``limit`` ids with the status ``status``."""
    return select(tasks.c.id).where(tasks.c.status == bindparam('status')).limit(
        bindparam('limit'))


def _processors(compiled: Any, names: Sequence[str], dialect: Any,
                fast: bool = True) -> list[tuple[int, Callable[[Any], Any]]]:
    """(index, bind processor) of the columns whose values need one (on SQLite a
    JSON column's is ``json.dumps`` itself: SQLAlchemy's adds three calls a value)."""
    found = []
    for index, name in enumerate(names):
        kind = compiled.binds[name].type
        process = kind.dialect_impl(dialect).bind_processor(dialect)
        if fast and process is not None and dialect.name == 'sqlite' \
                and isinstance(kind, sqlalchemy.JSON) and kind.none_as_null \
                and getattr(dialect, '_json_serializer', None) in (None, json.dumps):
            process = _JSON_TEXT
        if process is not None:
            found.append((index, process))
    return found


#: json.dumps(value) with its defaults, without its keyword checks.
_JSON_TEXT = json.JSONEncoder().encode


def _process_columns(flat: list[Any], width: int,
                     processed: Sequence[tuple[int, Callable[[Any], Any]]],
                     processed_none: Sequence[tuple[int, Callable[[Any], Any]]]) -> None:
    """Run the bind processors over the columns of rows laid out flat,
    ``width`` values a row: on the values there, and on the None values of
    the columns whose processor turns None into something else."""
    for index, process in processed:
        for at in range(index, len(flat), width):
            if flat[at] is not None:
                flat[at] = process(flat[at])
    for index, process in processed_none:
        for at in range(index, len(flat), width):
            if flat[at] is None:
                flat[at] = process(None)


#: Rows one PostgreSQL statement carries: one statement (and one run of the
#: counters' statement-level triggers, kale.store.sql.counters) a writer's batch.
POSTGRESQL_ROWS_PER_STATEMENT = 500


def _values_group(sql: str, width: int) -> 'tuple[str, str, str] | None':
    """A one-row INSERT's text as (head, its VALUES group, tail), the group
    holding all ``width`` placeholders (casts beside them); None otherwise."""
    head, found, rest = sql.partition(' VALUES (')
    if not found:
        return None
    depth, end = 1, 0
    while depth and end < len(rest):
        depth += {'(': 1, ')': -1}.get(rest[end], 0)
        end += 1
    group, tail = '(' + rest[:end], rest[end:]
    if depth or group.count('%s') != width or '%s' in tail:
        return None
    return head + ' VALUES ', group, tail


class WriteStatement:
    """A write statement compiled once: its SQL, how rows become the driver's
    parameters (a key a row lacks is None), and its form for many rows
    (:meth:`many`: a VALUES list on SQLite, a JSON document on PostgreSQL)."""

    def __init__(self, statement: Any, keys: Sequence[str], dialect: Any,
                 fast: bool = True):
        if dialect.name == 'postgresql':    # positional (%s, psycopg takes both): many rows
            dialect, named = type(dialect)(paramstyle='format'), dialect
            dialect.server_version_info = named.server_version_info
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        self.sql = str(compiled)
        names = self.names = list(compiled.positiontup)     # both dialects' are positional
        #: Where a value needs its bind processor (JSON to text): few columns do.
        self.processed = _processors(compiled, names, dialect, fast)
        #: The same, for the columns whose processor may turn None into
        #: something else (a JSON column that stores None as 'null'): the
        #: others' None values are passed as they are.
        self._processed_none = [(index, process) for index, process in self.processed
                                if process(None) is not None]
        self._get = operator.itemgetter(*names) if len(names) > 1 else \
            (lambda row: (row[names[0]],))
        #: How many rows one statement may carry (see _sqlite_rows, _postgresql_rows).
        self.rows_per_statement = 1
        self._multirow: dict[int, str] = {}
        #: PostgreSQL refuses a statement that upserts one id twice.
        self.ids_once = dialect.name == 'postgresql'
        self._recordset: 'str | None' = None
        if dialect.name == 'sqlite':
            self._sqlite_rows(statement, keys, dialect, fast)
        elif dialect.name == 'postgresql':
            self._postgresql_rows(dialect, fast)

    def _sqlite_rows(self, statement: Any, keys: Sequence[str], dialect: Any, fast: bool) -> None:
        """Several rows a statement, their bound variables under SQLite's limit
        (its oldest, 999, unless ``fast``)."""
        shape = _repeated_values(statement, keys, dialect, len(self.names))
        if shape is not None:
            self._head, self._group, self._tail = shape
            self.rows_per_statement = max(1, min(SQLITE_MAX_ROWS, (
                SQLITE_MAX_VARIABLES if fast else 999) // len(self.names)))

    def _postgresql_rows(self, dialect: Any, fast: bool) -> None:
        """Any number of rows a statement, as one JSON document (see :meth:`many`)."""
        shape = _values_group(self.sql, len(self.names))
        if not fast or shape is None or not all(name in tasks.c for name in self.names):
            return
        head, _, tail = shape
        self._recordset = '%sSELECT * FROM json_to_recordset(%%s::json) AS u(%s)%s' % (
            head.replace(' VALUES ', ' '), ', '.join(
                '%s %s' % (name, tasks.c[name].type.compile(dialect=dialect))
                for name in self.names), tail)
        self.rows_per_statement = POSTGRESQL_ROWS_PER_STATEMENT

    def many(self, rows: Sequence[dict[str, Any]]) -> tuple[str, list[Any]]:
        """The statement for ``rows`` and its parameters: SQLite's many-row VALUES
        form and the values one after the other, or PostgreSQL's one text for any
        number of rows, the rows one JSON document for ``json_to_recordset``."""
        if self._recordset is None:
            return self.multirow_sql(len(rows)), self.flat_parameters(rows)
        names = self.names
        return self._recordset, [json.dumps([{name: row.get(name) for name in names}
                                             for row in rows])]

    def multirow_sql(self, count: int) -> str:
        """The statement for ``count`` rows, their values in one flat sequence
        (SQLite applies the upsert row by row, in order, as executemany would)."""
        sql = self._multirow.get(count)
        if sql is None:
            sql = self._multirow[count] = self._head + ', '.join([self._group] * count) \
                + self._tail
        return sql

    def flat_parameters(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """The positional values of ``rows`` in one flat list, row after row
        (for :meth:`multirow_sql`)."""
        names, get, width = self.names, self._get, len(self.names)
        flat: list[Any] = []
        for row in rows:
            try:        # every key present (the usual row): one C call, in order
                flat.extend(get(row))
            except KeyError:
                flat.extend([row.get(name) for name in names])
        _process_columns(flat, width, self.processed, self._processed_none)
        return flat

    def parameters(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """Each row's parameters, for the driver's executemany of :attr:`sql`."""
        flat, width = self.flat_parameters(rows), len(self.names)
        return [tuple(flat[at:at + width]) for at in range(0, len(flat), width)]


def many_rows_sql(statement: Any, keys: Sequence[str], dialect: Any, count: int) -> str:
    """SQLAlchemy's compilation of ``statement`` carrying ``count`` rows of ``keys``."""
    rows: list[dict[str, Any]] = [{key: bindparam('%s_r%d' % (key, i)) for key in keys}
                                  for i in range(count)]
    return str(statement.values(rows).compile(dialect=dialect))


def _repeated_values(statement: Any, keys: Sequence[str], dialect: Any, width: int
                     ) -> 'tuple[str, str, str] | None':
    """The many-row form as (head, one row's values group, tail), from
    SQLAlchemy's one- and two-row compilations (checked against the three-row
    one); None when the texts do not have that shape."""
    one, two = (many_rows_sql(statement, keys, dialect, n) for n in (1, 2))
    size = len(two) - len(one) - 2
    common = 0
    while common < len(one) and one[common] == two[common]:
        common += 1
    head, group = one[:common - size], one[common - size:common]
    tail = one[common:]
    if size <= 0 or two != head + group + ', ' + group + tail \
            or group != '(%s)' % ', '.join('?' * width) \
            or many_rows_sql(statement, keys, dialect, 3) != \
            head + ', '.join([group] * 3) + tail:
        return None
    return head, group, tail


class Query:
    """A read compiled once: its SQL and the order of its parameters."""

    def __init__(self, statement: Any, dialect: Any):
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self.positional = bool(compiled.positional)
        self.names = list(compiled.positiontup or ()) if self.positional else list(compiled.binds)
        #: Binds SQLAlchemy adds with a value of their own (SQLite's OFFSET 0).
        self.fixed = {name: compiled.binds[name].value for name in self.names}

    def parameters(self, values: dict[str, Any]) -> Any:
        """The driver's parameters for these named values."""
        found = [values[name] if name in values else self.fixed[name] for name in self.names]
        return found if self.positional else dict(zip(self.names, found, strict=True))


class Driver:
    """The named statements of one database dialect, compiled on first use."""

    def __init__(self, dialect: Any, fast: bool = True):
        self.dialect = dialect
        self.name = dialect.name
        #: The writes as fast as they go (False: the volume benchmark's baseline,
        #: see "Statements on the raw driver").
        self.fast = fast
        self._made: dict[tuple[Any, ...], Any] = {}

    def _once(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """What ``build`` makes for ``key``, made on first use."""
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = build()
        return found

    def write(self, kind: str, keys: Sequence[str]) -> WriteStatement:
        """The ``published`` or ``event`` write for rows with these keys."""
        build = published_statement if kind == 'published' else event_statement
        return self._once((kind, tuple(keys)), lambda: WriteStatement(
            build(self.name), keys, self.dialect, self.fast))

    def status_among(self, status: str, task_ids: Sequence[str]) -> tuple[str, Any]:
        """SQL and parameters: which of ``task_ids`` have ``status``."""
        count = len(task_ids) if self.name != 'postgresql' else 0
        query = self._once(('cancelled_among', count), lambda: Query(
            cancelled_among_statement(self.name, count), self.dialect))
        values: dict[str, Any] = {'status': status, 'ids': list(task_ids)}
        values.update(('id%d' % i, task_id) for i, task_id in enumerate(task_ids))
        return query.sql, query.parameters(values)

    def all_cancelled(self, limit: int) -> tuple[str, Any]:
        """SQL and parameters: up to ``limit`` cancelled ids."""
        query = self._once(('all_cancelled',), lambda: Query(all_cancelled_statement(), self.dialect))
        return query.sql, query.parameters({'status': TaskStatus.CANCELLED, 'limit': limit})


def same_keys(rows: Sequence[dict[str, Any]]) -> list[Sequence[dict[str, Any]]]:
    """The rows in groups that have the same keys, in order of first appearance."""
    if not rows:
        return []
    first = rows[0].keys()
    if all(row.keys() == first for row in rows):
        return [rows]
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    return list(groups.values())


def chunks(rows: Sequence[dict[str, Any]], size: int,
           ids_once: bool = False) -> Iterator[Sequence[dict[str, Any]]]:
    """The rows in order, ``size`` at a time; with ``ids_once``, a chunk also ends
    before an id it holds already (in order they do what one statement each would)."""
    if not ids_once:
        for start in range(0, len(rows), size):
            yield rows[start:start + size]
        return
    chunk: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for row in rows:
        if len(chunk) >= size or row.get('id') in seen:
            yield chunk
            chunk, seen = [], set()
        chunk.append(row)
        seen.add(row.get('id'))
    if chunk:
        yield chunk
