"""The task records' facets in memory (see :mod:`kale.store.records`): rows
by task id, attempts, workers' rows, under the memory store's lock, and the
questions about many of them."""
from __future__ import annotations

import collections
import copy
import math
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

from kale.statuses import FINAL_TASK, TaskStatus
from kale.store.counts import (
    MINUTE,
    MinuteRow,
    TaskCounts,
    count_of,
    counted,
    first_whole_minute,
    matches_counted,
    summary_of,
    timeline_of,
)
from kale.store.record import MAX_LIMIT, TaskFilter, TaskRecord, WorkerRecord, decode_cursor
from kale.store.records import (
    ENDED_TASKS,
    ENDED_WORKFLOWS,
    EVENT_COLUMNS,
    PUBLISHED_COLUMNS,
    RAN,
    TASK_COLUMNS,
    WAITING,
    DerivedQueries,
    Page,
    Row,
    Series,
    activity_answer,
    add_runs,
    check_activity_by,
    check_worker_state,
    ended_waiting,
    expired,
    page_of,
    rows_to_write,
    timeline_answer,
    workers_in_order,
)

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore

#: The columns a publication that starts a new life takes from its row.
_LIFE_COLUMNS = tuple(name for name in TASK_COLUMNS
                      if name not in PUBLISHED_COLUMNS and name != 'id')
_ENDED_UNSUCCESSFULLY = tuple(status for status in FINAL_TASK if status != TaskStatus.SUCCEEDED)


class MemoryRecords:
    """Rows as the database would hold them (copies go in and out)."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.tasks: dict[str, Row] = {}
        self.attempt_rows: dict[tuple[str, int], Row] = {}
        self.workers: dict[str, Row] = {}
        #: The counters the summary and the timeline read (kale.store.counts).
        self.counts = TaskCounts()

    # --- writes -----------------------------------------------------------------------

    def write(self, published: Sequence[Row], events: Sequence[Row], worker_rows: Sequence[Row],
              attempt_rows: Optional[Sequence[Row]] = None, sealed: bool = False) -> None:
        published, events, attempt_rows = rows_to_write(self.root.sealer, published, events,
                                                        attempt_rows, sealed)
        with self.root.lock:
            for row in published:
                self._publish(copy.deepcopy(row))
            for row in events:
                self._event(copy.deepcopy(row))
            for row in worker_rows:
                self.workers.setdefault(row['id'], {}).update(copy.deepcopy(row))
            for row in attempt_rows:
                self.attempt_rows.setdefault((row['task_id'], row['attempt']), copy.deepcopy(row))

    def _publish(self, row: Row) -> None:
        new = {name: row.get(name) for name in TASK_COLUMNS}
        held = self.tasks.get(row['id'])
        if held is None:
            self.tasks[row['id']] = new
            self.counts.add(new)
            return
        new_life = held['status'] in _ENDED_UNSUCCESSFULLY and held['finished_at'] is not None \
            and held['finished_at'] < new['published_at']
        self._change(held, {name: new[name] for name in (
            PUBLISHED_COLUMNS + _LIFE_COLUMNS if new_life else PUBLISHED_COLUMNS)})

    def _event(self, row: Row) -> None:
        held = self.tasks.get(row['id'])
        if held is None:
            held = self.tasks[row['id']] = {name: row.get(name) for name in TASK_COLUMNS}
            self.counts.add(held)
        elif held['updated_at'] <= row['updated_at']:           # the newest event wins
            self._change(held, {name: row.get(name) for name in EVENT_COLUMNS})

    def _change(self, held: Row, values: Row) -> None:
        """Change a row, its counters with it."""
        self.counts.add(held, -1)
        held.update(values)
        self.counts.add(held)

    def cancel(self, task_id: str, now: Optional[float] = None) -> bool:
        now = time.time() if now is None else now
        with self.root.lock:
            held = self.tasks.get(task_id)
            if held is None or held['status'] not in WAITING:
                return False
            self._change(held, ended_waiting(TaskStatus.CANCELLED, now))
            return True

    def mark_purged(self, queue: str, before: float, now: Optional[float] = None) -> int:
        now = time.time() if now is None else now
        with self.root.lock:
            purged = [row for row in self.tasks.values() if row['queue'] == queue
                      and row['status'] in WAITING and row['updated_at'] <= before]
            for row in purged:
                self._change(row, ended_waiting(TaskStatus.PURGED, now))
            return len(purged)

    def purge_expired(self, succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                      now: Optional[float] = None, queued_ttl: Optional[float] = None) -> int:
        now = time.time() if now is None else now
        if succeeded_ttl is None and failed_ttl is None and queued_ttl is None:
            return 0
        rules = expired(ENDED_TASKS, succeeded_ttl, failed_ttl, now)
        with self.root.lock:
            kept = {task_id: row for task_id, row in self.tasks.items()
                    if not _expired(row, rules, queued_ttl, now)}
            for task_id, row in self.tasks.items():
                if task_id not in kept:
                    self.counts.add(row, -1)
            gone, self.tasks = len(self.tasks) - len(kept), kept
            self._purge_others(succeeded_ttl, failed_ttl, now)
            return gone

    def _purge_others(self, succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                      now: float) -> None:
        """Workers silent for ``failed_ttl``, unique keys expired, workflows ended."""
        if failed_ttl is not None:
            self.workers = {worker_id: row for worker_id, row in self.workers.items()
                            if row['heartbeat_at'] >= now - failed_ttl}
        self.root.unique.keys = {key: held for key, held in self.root.unique.keys.items()
                                 if held[1] >= now}
        self._purge_workflows(succeeded_ttl, failed_ttl, now)

    def _purge_workflows(self, succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                         now: float) -> None:
        flows = self.root.workflows
        rules = expired(ENDED_WORKFLOWS, succeeded_ttl, failed_ttl, now)
        ended = {row.id for row in flows.rows.values() if row.finished_at is not None and any(
            row.status in statuses and row.finished_at < before for statuses, before in rules)}
        flows.rows = {key: row for key, row in flows.rows.items() if key not in ended}
        flows.node_rows = {key: node for key, node in flows.node_rows.items()
                           if node.workflow_id not in ended}

    def roll_up(self) -> bool:
        """Nothing to fold: the counters change with the rows."""
        return True

    def claim_retry(self, task_id: str, marker: str) -> bool:
        with self.root.lock:
            held = self.tasks.get(task_id)
            if held is None or held['retried_as'] is not None:
                return False
            held['retried_as'] = marker
            return True

    def replace_retry(self, task_id: str, marker: str, value: Optional[str]) -> None:
        with self.root.lock:
            held = self.tasks.get(task_id)
            if held is not None and held['retried_as'] == marker:
                held['retried_as'] = value

    def retried_as(self, task_id: str) -> Optional[str]:
        with self.root.lock:
            held = self.tasks.get(task_id)
            return str(held['retried_as']) if held and held['retried_as'] is not None else None

    # --- reads ------------------------------------------------------------------------

    def get(self, task_id: str) -> Optional[Row]:
        with self.root.lock:
            held = self.tasks.get(task_id)
            return copy.deepcopy(held) if held is not None else None

    def attempts(self, task_id: str) -> list[Row]:
        with self.root.lock:
            rows = [copy.deepcopy(row) for (held, _), row in sorted(self.attempt_rows.items())
                    if held == task_id]
        return [self.root.sealer.open_row(row) for row in rows]

    def cancelled_among(self, task_ids: Sequence[str]) -> set[str]:
        return self._with_status(TaskStatus.CANCELLED, task_ids)

    def succeeded_among(self, task_ids: Sequence[str]) -> set[str]:
        return self._with_status(TaskStatus.SUCCEEDED, task_ids)

    def _with_status(self, status: TaskStatus, task_ids: Sequence[str]) -> set[str]:
        with self.root.lock:
            return {task_id for task_id in task_ids
                    if self.tasks.get(task_id, {}).get('status') == status}

    def message_owners(self, message_ids: Sequence[str],
                       not_ids: Sequence[str] = ()) -> dict[str, str]:
        wanted, left_out = set(message_ids), set(not_ids)
        owners: dict[str, tuple[float, str]] = {}
        with self.root.lock:
            for row in self.tasks.values():
                message_id = row['message_id']
                if message_id in wanted and row['id'] not in left_out and (
                        message_id not in owners or owners[message_id][0] > row['published_at']):
                    owners[message_id] = (row['published_at'], row['id'])
        return {message_id: task_id for message_id, (_, task_id) in owners.items()}


def _expired(row: Row, rules: list[tuple[tuple[str, ...], float]], queued_ttl: Optional[float],
             now: float) -> bool:
    if row['status'] in WAITING and queued_ttl is not None:   # a task due later waits in SQS
        due = row['next_attempt_at']
        return row['updated_at'] < now - queued_ttl and (due is None or due < now - queued_ttl)
    return row['finished_at'] is not None and any(
        row['status'] in statuses and row['finished_at'] < before for statuses, before in rules)




def matches(where: TaskFilter, row: Row) -> bool:
    """Whether a task's row passes the filter."""
    labels = row['labels'] or {}
    return matches_counted(where, row['task'], row['queue'], row['status']) \
        and all(labels.get(key) == value for key, value in where.labels) \
        and (where.since is None or row['published_at'] >= where.since) \
        and (where.until is None or row['published_at'] < where.until)


def _run_row(row: Row, unit: int) -> MinuteRow:
    """A run as a counted row of one run, numbered in ``unit`` seconds."""
    return (int(row['finished_at'] // unit), row['task'], str(row['status']), 1,
            float(row['duration_sec'] or 0.0), int(row['duration_sec'] is not None))


class MemoryQueries(DerivedQueries):
    """The questions of :class:`kale.store.sql.queries.Queries`, on rows in memory."""

    def __init__(self, records: 'MemoryRecords'):
        self.records = records

    def _rows(self, where: TaskFilter) -> list[Row]:
        with self.records.root.lock:
            return [dict(row) for row in self.records.tasks.values() if matches(where, row)]

    def _ended(self, since: float) -> list[Row]:
        """The runs that ended at ``since`` or later."""
        return [row for row in self._rows(TaskFilter(statuses=RAN))
                if row['finished_at'] is not None and row['finished_at'] >= since]

    def page(self, where: TaskFilter, limit: int = 50, cursor: Optional[str] = None) -> Page:
        rows = sorted(self._rows(where), key=lambda row: (row['published_at'], row['id']),
                      reverse=True)
        if cursor:
            after = decode_cursor(cursor)
            rows = [row for row in rows if (row['published_at'], row['id']) < after]
        return page_of([TaskRecord.from_row(row, self.records.root.sealer)
                        for row in rows[:limit + 1]], limit)

    def count(self, where: TaskFilter) -> int:
        if counted(where):
            with self.records.root.lock:
                return count_of(self.records.counts.count_rows(), where)
        return len(self._rows(where))

    def summary(self, where: TaskFilter) -> dict[str, Any]:
        if counted(where):
            with self.records.root.lock:
                rows = self.records.counts.count_rows()
        else:
            rows = [(row['task'], row['queue'], str(row['status']), 1)
                    for row in self._rows(where)]
        return summary_of(rows, where)

    def oldest_queued(self, now: Optional[float] = None) -> dict[str, float]:
        now = time.time() if now is None else now
        oldest: dict[str, float] = {}
        for row in self._rows(TaskFilter(statuses=(TaskStatus.QUEUED,))):
            due = row['next_attempt_at'] if row['next_attempt_at'] is not None \
                else row['published_at']
            if due <= now:
                oldest[row['queue']] = min(float(due), oldest.get(row['queue'], math.inf))
        return oldest

    def scheduled_after(self, after: float) -> dict[str, tuple[int, float]]:
        found: dict[str, tuple[int, float]] = {}
        for row in self._rows(TaskFilter(statuses=(TaskStatus.SCHEDULED,))):
            due = row['next_attempt_at']
            if due is not None and due > after:
                n, earliest = found.get(row['queue'], (0, math.inf))
                found[row['queue']] = (n + 1, min(earliest, float(due)))
        return found

    def delete(self, where: TaskFilter) -> int:
        with self.records.root.lock:
            gone = [task_id for task_id, row in self.records.tasks.items() if matches(where, row)]
            for task_id in gone:
                self.records.counts.add(self.records.tasks.pop(task_id), -1)
            return len(gone)

    def timeline(self, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        since = now - window_sec
        whole = not bucket_sec % MINUTE     # else buckets that are not whole minutes: every run
        unit, until = (MINUTE, first_whole_minute(since) * MINUTE) if whole else (bucket_sec, math.inf)
        with self.records.root.lock:
            minutes = self.records.counts.minute_rows(first_whole_minute(since)) if whole else []
            ended = self._ended(min(since, now - 60))
        edge = [_run_row(row, unit) for row in ended if since <= row['finished_at'] < until]
        last_minute = collections.Counter(row['queue'] for row in ended
                                          if row['finished_at'] >= now - 60)
        return timeline_answer(window_sec, bucket_sec, timeline_of(minutes, edge, bucket_sec, unit=unit),
                               dict(last_minute))

    def activity(self, by: str, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        check_activity_by(by)
        since = (time.time() if now is None else now) - window_sec
        series: Series = {}
        for row in self._ended(since):
            add_runs(series, row[by], row['finished_at'] // bucket_sec, str(row['status']), 1,
                     row['duration_sec'])
        with self.records.root.lock:
            tasks = self.records.tasks
            retried = [(tasks[task_id][by], dict(row)) for (task_id, _), row
                       in self.records.attempt_rows.items() if task_id in tasks]
        for name, row in retried:
            if row['finished_at'] is not None and row['finished_at'] >= since:
                add_runs(series, name, row['finished_at'] // bucket_sec, 'retried', 1,
                         row['duration_sec'])
        return activity_answer(by, window_sec, bucket_sec, series)

    def workers(self, state: Optional[str] = None,
                now: Optional[float] = None) -> list[WorkerRecord]:
        check_worker_state(state)
        now = time.time() if now is None else now
        with self.records.root.lock:
            rows = sorted((dict(row) for row in self.records.workers.values()),
                          key=lambda row: -row['started_at'])[:MAX_LIMIT]
        found = [WorkerRecord.from_row(row, now) for row in rows]
        return workers_in_order([worker for worker in found
                                 if state is None or worker.state == state])

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        with self.records.root.lock:
            return sorted(task_id for task_id in self.records.tasks
                          if task_id.startswith(prefix))[:limit]
