"""What is scheduled, as ``kale schedules list``, ``GET /api/schedules`` and
the dashboard show it, and a run fired by hand (``kale schedules run``)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.schedules.scheduler import publish_run, records_state
from kale.schedules.spec import Schedule
from kale.store.record import iso
from kale.store.schedules import Lease, Progress

if TYPE_CHECKING:
    from kale.app import App

#: Next run times listed for each schedule.
NEXT_RUNS = 3


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def describe(app: 'App', clock: Clock = SYSTEM_CLOCK, count: int = NEXT_RUNS,
             public: bool = False) -> dict[str, Any]:
    """Every schedule (its task, times and next ``count`` runs; with records, its last tick and
    that tick's task and status), the broken ones (``public``: their lines without a file's
    path), and the scheduler that leads, if one does."""
    now = clock.time()
    found = app.schedules
    records = bool(app.config.RECORDS_URL)
    progress: dict[str, Progress] = {}
    statuses: dict[str, str] = {}
    lease: Optional[Lease] = None
    if records:
        state = records_state(app)
        progress, lease = state.progress(), state.lease()
        statuses = state.task_statuses(p.last_task_id for p in progress.values() if p.last_task_id)
    rows = [{**_schedule_row(schedule, now, count),
             **_last_run(progress.get(schedule.name), statuses)} for schedule in found]
    broken = [{'name': b.name, 'task': b.task,
               'error': b.public if public and b.public is not None else b.error}
              for b in found.broken]
    return {'schedules': rows, 'broken': broken, 'searched': found.searched,
            'records': records, 'leader': _leader(lease, now)}


def _schedule_row(schedule: Schedule, now: float, count: int) -> dict[str, Any]:
    """What the schedule says: its task, when it runs, and its next ``count`` run times."""
    return {
        'name': schedule.name, 'task': schedule.task_path, 'schedule': schedule.describe(),
        'kind': 'cron' if schedule.is_cron else 'interval', 'tz': schedule.tz,
        'catch_up': schedule.catch_up,
        'queue': schedule.queue or schedule.task_class.queue,
        'args': _json(list(schedule.args)), 'kwargs': _json(dict(schedule.kwargs)),
        'next_runs': [iso(tick) for tick in schedule.upcoming(now, count)]}


def _last_run(row: Optional[Progress], statuses: dict[str, str]) -> dict[str, Any]:
    """The schedule's last tick, that tick's task and the task's status (None
    without progress in the records)."""
    if row is None:
        return dict.fromkeys(('last_tick', 'last_task_id', 'last_task_status', 'last_published_at'))
    last_task = row.last_task_id
    return {'last_tick': iso(row.last_tick), 'last_task_id': last_task,
            'last_task_status': statuses.get(last_task) if last_task else None,
            'last_published_at': iso(row.last_published_at)}


def _leader(lease: Optional[Lease], now: float) -> Optional[dict[str, Any]]:
    """The scheduler that leads, if its lease has not ended."""
    if lease is None or lease.expires_at <= now:
        return None
    return {'holder': lease.holder, 'since': iso(lease.acquired_at),
            'expires_at': iso(lease.expires_at)}


def run_now(app: 'App', name: str) -> str:
    """Publish one run of ``app``'s schedule called ``name`` now, with a task
    id of its own (not a tick's: the schedule's ticks go on as before)."""
    return publish_run(app.publisher, app.schedules.get(name))
