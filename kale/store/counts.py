"""Counters of task records, kept as the records are written, so that the
summary and the timeline read a few hundred rows instead of the whole table;
both stores answer through :func:`summary_of` and :func:`timeline_of`
(docs/explanation/internals-store.md, "The records' counters")."""
from __future__ import annotations

import math
from typing import Any, Iterable

from kale.statuses import PENDING_FILTER, PENDING_TASK, TaskStatus
from kale.store.record import TaskFilter
from kale.store.records import RAN

#: Seconds in a counted bucket of the timeline.
MINUTE = 60

#: (task, queue, status, how many)
CountRow = tuple[str, str, str, int]
#: (minute, task, status, runs, sum of their durations, runs with a duration)
MinuteRow = tuple[int, str, str, int, float, int]


def counted(where: TaskFilter) -> bool:
    """Whether the counters answer for ``where`` (no labels, no times)."""
    return not where.labels and where.since is None and where.until is None


def matches_counted(where: TaskFilter, task: str, queue: str, status: str) -> bool:
    """Whether ``where``'s statuses, task and queue match (a task filter
    matches the path, or a class name alone in any module)."""
    wanted = where.task
    return (not where.statuses or status in where.statuses) \
        and (not wanted or task == wanted or ('.' not in wanted and task.endswith('.' + wanted))) \
        and (not where.queue or queue == where.queue)


def count_of(rows: Iterable[CountRow], where: TaskFilter) -> int:
    """How many records ``where`` matches, from the counters."""
    return sum(n for task, queue, status, n in rows if n and matches_counted(where, task, queue, status))


def summary_of(rows: Iterable[CountRow], where: TaskFilter) -> dict[str, Any]:
    """The summary (counts by status, by task and status, by queue and status) from the counters."""
    by_status: dict[str, int] = {status.value: 0 for status in TaskStatus}
    by_task: dict[str, dict[str, int]] = {}
    by_queue: dict[str, dict[str, int]] = {}
    for task, queue, status, n in rows:
        if n <= 0 or not matches_counted(where, task, queue, status):
            continue
        by_status[status] = by_status.get(status, 0) + n
        for table, key in ((by_task, task), (by_queue, queue)):
            table.setdefault(key, {})
            table[key][status] = table[key].get(status, 0) + n
    by_status[PENDING_FILTER] = sum(by_status[s] for s in PENDING_TASK)
    return {'by_status': by_status, 'by_task': by_task, 'by_queue': by_queue}


def first_whole_minute(since: float) -> int:
    """The first minute that starts at or after ``since``."""
    return math.ceil(since / MINUTE)


_EMPTY_POINT: dict[str, Any] = {**{ran.value: 0 for ran in RAN}, 'duration_sum': 0.0, 'timed': 0}
_CANCELLED = TaskStatus.CANCELLED.value


def timeline_of(minutes: Iterable[MinuteRow], edge: Iterable[MinuteRow],
                bucket_sec: int, unit: int = MINUTE) -> dict[str, dict[int, dict[str, Any]]]:
    """The timeline's points by task and bucket number: the counted minutes and
    ``edge`` (the partial minute before them) summed into buckets of
    ``bucket_sec`` (rows numbered in ``unit`` seconds), durations as a scan's
    averages make them."""
    sums: dict[tuple[str, int, str], list[float]] = {}
    edge = list(edge)
    for minute, task, status, n, total, timed in [*minutes, *edge]:
        if n <= 0:
            continue
        found = sums.setdefault((task, int((minute * unit) // bucket_sec), status), [0, 0.0, 0])
        found[0] += n
        found[1] += total
        found[2] += timed
    series: dict[str, dict[int, dict[str, Any]]] = {}
    for (task, bucket, status), (runs, summed, timed_runs) in sums.items():
        points = series.setdefault(task, {})
        point = points.get(bucket)
        if point is None:
            point = points[bucket] = dict(_EMPTY_POINT)
        point[status] += int(runs)
        if timed_runs and status != _CANCELLED:      # a scan: mean of the timed, times all
            point['duration_sum'] += summed / timed_runs * runs
            point['timed'] += int(runs)
    return series


class TaskCounts:
    """The counters of the memory store: :meth:`add` a row as it is stored,
    ``add(row, -1)`` before it changes or goes."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}
        self.minutes: dict[tuple[int, str, str], list[float]] = {}

    def add(self, row: dict[str, Any], sign: int = 1) -> None:
        key = str(row['task']), str(row['queue']), str(row['status'])
        self.counts[key] = self.counts.get(key, 0) + sign
        if not self.counts[key]:
            del self.counts[key]
        if row.get('status') not in RAN or row.get('finished_at') is None:
            return          # not a finished run
        minute = int(row['finished_at'] // MINUTE), str(row['task']), str(row['status'])
        found = self.minutes.setdefault(minute, [0, 0.0, 0])
        duration = row.get('duration_sec')
        found[0] += sign
        found[1] += sign * float(duration or 0.0)
        found[2] += sign * (duration is not None)
        if not found[0]:
            del self.minutes[minute]

    def count_rows(self) -> list[CountRow]:
        return [(task, queue, status, n) for (task, queue, status), n in self.counts.items()]

    def minute_rows(self, first: int) -> list[MinuteRow]:
        return [(minute, task, status, int(n), total, int(timed))
                for (minute, task, status), (n, total, timed) in self.minutes.items()
                if minute >= first]
