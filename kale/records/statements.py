"""Statements the records store hands straight to the database driver:
compiled once, their rows turned into the driver's parameters with as little
Python per row as can be (see :class:`DriverStatement`)."""
from __future__ import annotations

import operator
from typing import Any, Sequence

#: Bound variables one SQLite statement may have (the limit of SQLite
#: before 3.32; later versions allow more).
SQLITE_MAX_VARIABLES = 999


class DriverStatement:
    """A statement compiled once, for the driver's own executemany: its SQL
    and how to turn rows into the driver's parameters (SQLAlchemy's bind
    processors, e.g. JSON to text); a key a row lacks is None."""

    def __init__(self, statement: Any, keys: Sequence[str], dialect: Any):
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        self.sql = str(compiled)
        self.positional = bool(compiled.positional)
        names = list(compiled.positiontup or ()) if self.positional else list(compiled.binds)
        processors = [compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
                      for name in names]
        self.names = names
        #: Where a value needs its bind processor (JSON to text): few columns do.
        self.processed = [(index, process) for index, process in enumerate(processors)
                          if process is not None]
        #: The same, for the columns whose processor may turn None into
        #: something else (a JSON column that stores None as 'null'): the
        #: others' None values are passed as they are.
        self._processed_none = [(index, process) for index, process in self.processed
                                if process(None) is not None]
        self._get = operator.itemgetter(*names) if len(names) > 1 else None
        #: How many rows one statement may carry: several where the driver
        #: is SQLite and the SQL has one plain ``VALUES (?, ...)`` group to
        #: repeat (its bound variables kept under SQLite's oldest limit of 999).
        self.rows_per_statement = 1
        self._multirow: dict[int, str] = {}
        head, found, tail = self.sql.partition(' VALUES (')
        group = '(' + tail.split(')', 1)[0] + ')'
        if dialect.name == 'sqlite' and found and self.positional \
                and group == '(%s)' % ', '.join('?' * len(names)):
            self.rows_per_statement = max(1, SQLITE_MAX_VARIABLES // len(names))
            self._head, self._group, self._tail = head + ' VALUES ', group, tail[len(group) - 1:]

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
                flat.extend(get(row) if get is not None else (row[names[0]],))
            except KeyError:
                flat.extend([row.get(name) for name in names])
        for index, process in self.processed:
            for at in range(index, len(flat), width):
                if flat[at] is not None:
                    flat[at] = process(flat[at])
        for index, process in self._processed_none:
            for at in range(index, len(flat), width):
                if flat[at] is None:
                    flat[at] = process(None)
        return flat

    def parameters(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        names, processed, get = self.names, self.processed, self._get
        values = []
        for row in rows:
            try:        # every key present (the usual row): one C call, in order
                found = list(get(row)) if get is not None else [row.get(names[0])]
            except KeyError:
                found = [row.get(name) for name in names]
            for index, process in processed:
                found[index] = process(found[index])
            values.append(tuple(found) if self.positional else dict(zip(names, found, strict=True)))
        return values


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
