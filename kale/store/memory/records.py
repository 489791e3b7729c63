"""The task records' facet in memory (see :mod:`kale.store.records`): rows
by task id, attempts, workers' rows, under the memory store's lock."""
from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

from kale.statuses import FINAL_TASK, TaskStatus
from kale.store.counts import TaskCounts
from kale.store.records import (
    ENDED_TASKS,
    ENDED_WORKFLOWS,
    EVENT_COLUMNS,
    PUBLISHED_COLUMNS,
    TASK_COLUMNS,
    WAITING,
    Row,
    ended_waiting,
    expired,
    rows_to_write,
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

    @property
    def sealer(self) -> Any:
        return self.root.sealer

    # --- writes -----------------------------------------------------------------------

    def write(self, published: Sequence[Row], events: Sequence[Row], worker_rows: Sequence[Row],
              attempt_rows: Optional[Sequence[Row]] = None, sealed: bool = False) -> None:
        published, events, attempt_rows = rows_to_write(self.sealer, published, events,
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
        return [self.sealer.open_row(row) for row in rows]

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


__all__ = ['MemoryRecords']
