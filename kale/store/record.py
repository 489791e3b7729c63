"""TaskRecord and WorkerRecord: rows as Python objects, and as JSON.

Times are epoch seconds in Python and ISO 8601 (UTC) in JSON.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import json
import math
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale.exceptions import BadFilterError
from kale.statuses import FINAL_TASK as FINAL
from kale.statuses import PENDING_TASK as PENDING
from kale.statuses import WorkerState

if TYPE_CHECKING:
    from kale.store.sealing import Sealer

#: Fields left out of task lists (``GET /api/tasks``, ``kale tasks list``).
DETAIL_FIELDS = ('inputs', 'error_traceback', 'result', 'stderr')
#: A worker whose heartbeat is older than this many intervals is lost.
LOST_AFTER_HEARTBEATS = 3


def iso(epoch: Optional[float]) -> Optional[str]:
    if epoch is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """One task's record. ``status`` is one of queued, running, scheduled,
    succeeded, failed, cancelled, purged, deduplicated."""

    id: str
    task: str
    queue: str
    status: str
    attempts: int
    labels: dict[str, str]
    inputs: Optional[dict[str, Any]]
    published_at: float
    started_at: Optional[float]
    finished_at: Optional[float]
    next_attempt_at: Optional[float]
    duration_sec: Optional[float]
    worker: Optional[str]
    error_type: Optional[str]
    error_message: Optional[str]
    error_traceback: Optional[str]
    dead_letter_reason: Optional[str]
    result: Any
    updated_at: float
    #: The SQS message id of its publish (None for records written before it was kept).
    message_id: Optional[str] = None
    #: ``deduplicated``: the task whose message SQS kept instead of this one's.
    duplicate_of: Optional[str] = None
    #: The task published by retrying this one from its record (once).
    retried_as: Optional[str] = None
    #: The end of an executor program's standard error, from its last run.
    stderr: Optional[str] = None
    #: A dead run: the task that failed for good, whose dead letter it handles.
    dead_of: Optional[str] = None
    #: The MAC over the task and its stored arguments that a retry checks
    #: (:mod:`kale.store.sealing`); not shown by the API.
    inputs_mac: Optional[str] = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | Any, sealer: 'Sealer') -> 'TaskRecord':
        """The record of a row, its sealed values opened by its store's ``sealer``."""
        values: dict[str, Any] = sealer.open_row(
            {field.name: row.get(field.name) for field in dataclasses.fields(cls)})
        inputs = values['inputs']
        if isinstance(inputs, dict) and 'mac' in inputs:
            values['inputs'] = {key: value for key, value in inputs.items() if key != 'mac'}
            values['inputs_mac'] = inputs['mac']
        values['labels'] = values['labels'] or {}
        return cls(**values)

    @property
    def finished(self) -> bool:
        return self.status in FINAL

    @property
    def pending(self) -> bool:
        return self.status in PENDING

    @property
    def args(self) -> Optional[list]:
        return self.inputs.get('args') if self.inputs else None

    @property
    def kwargs(self) -> Optional[dict]:
        return self.inputs.get('kwargs') if self.inputs else None

    def as_json(self, detail: bool = True) -> dict[str, Any]:
        """The record for the REST API; without ``detail``, no inputs, traceback or result."""
        data = dataclasses.asdict(self)
        data.pop('inputs_mac')
        for name in ('published_at', 'started_at', 'finished_at', 'next_attempt_at',
                     'updated_at'):
            data[name] = iso(data[name])
        if not detail:
            for name in DETAIL_FIELDS:
                data.pop(name)
        return data


@dataclasses.dataclass(frozen=True)
class WorkerRecord:
    """A worker or supervisor process. ``state`` is running, stopped or lost
    (no heartbeat for three intervals)."""

    id: str
    role: str
    host: str
    pid: int
    queues: list[str]
    version: Optional[str]
    started_at: float
    heartbeat_at: float
    heartbeat_sec: float
    stopped_at: Optional[float]
    current_task: Optional[str]
    current_task_name: Optional[str]
    counts: dict[str, int]
    state: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | Any, now: float) -> 'WorkerRecord':
        values: dict[str, Any] = {field.name: row.get(field.name)
                                  for field in dataclasses.fields(cls) if field.name != 'state'}
        values['queues'] = values['queues'] or []
        values['counts'] = values['counts'] or {}
        return cls(state=worker_state(row, now), **values)

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ('started_at', 'heartbeat_at', 'stopped_at'):
            data[name] = iso(data[name])
        return data


def worker_state(row: Mapping[str, Any], now: float) -> WorkerState:
    if row.get('stopped_at') is not None:
        return WorkerState.STOPPED
    if now - row['heartbeat_at'] > LOST_AFTER_HEARTBEATS * row['heartbeat_sec']:
        return WorkerState.LOST
    return WorkerState.RUNNING


#: Rows one page of records holds unless asked otherwise, and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class TaskFilter:
    """Which records a question is about; empty: all of them."""

    statuses: tuple[str, ...] = ()
    task: Optional[str] = None
    queue: Optional[str] = None
    labels: tuple[tuple[str, str], ...] = ()
    since: Optional[float] = None
    until: Optional[float] = None

    @property
    def empty(self) -> bool:
        return self == TaskFilter()


#: The longest task id a keyset page's cursor may carry.
MAX_CURSOR_ID_CHARS = 200


def encode_cursor(record: TaskRecord) -> str:
    raw = json.dumps([record.published_at, record.id], separators=(',', ':')).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip('=')


def decode_cursor(text: str) -> tuple[float, str]:
    if len(text) > 2 * MAX_CURSOR_ID_CHARS:
        raise BadFilterError('cursor %r is not one this server gave out' % text[:100])
    try:
        raw = base64.urlsafe_b64decode(text + '=' * (-len(text) % 4))
        published_at, task_id = json.loads(raw)
        if isinstance(published_at, (int, float)) and not isinstance(published_at, bool) \
                and math.isfinite(published_at) and isinstance(task_id, str) \
                and len(task_id) <= MAX_CURSOR_ID_CHARS:
            return float(published_at), task_id
    except (ValueError, binascii.Error, TypeError):
        pass
    raise BadFilterError('cursor %r is not one this server gave out' % text[:100])
