"""What is scheduled, as ``kale schedules list``, ``GET /api/schedules`` and
the dashboard show it, and a run fired by hand (``kale schedules run``)."""
from __future__ import annotations

import json
from typing import Any, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.config import Config
from kale.publisher import Publisher, get_publisher
from kale.records.record import iso
from kale.schedules.discovery import get_schedules
from kale.schedules.scheduler import publish_run, records_state
from kale.store.schedules import Lease, Progress

#: Next run times listed for each schedule.
NEXT_RUNS = 3


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def describe(config: Config, clock: Clock = SYSTEM_CLOCK, count: int = NEXT_RUNS,
             records_url: Optional[str] = None) -> dict[str, Any]:
    """Every schedule: its task, when it runs, its next ``count`` run times,
    and from the records (when on) its last tick, that tick's task and the
    task's status; and the scheduler that leads, if one does."""
    now = clock.time()
    found = get_schedules(config)
    progress: dict[str, Progress] = {}
    statuses: dict[str, str] = {}
    lease: Optional[Lease] = None
    if records_url or config.RECORDS_URL:
        state = records_state(config, records_url)
        progress = state.progress()
        lease = state.lease()
        statuses = state.task_statuses(p.last_task_id for p in progress.values()
                                       if p.last_task_id)
    rows = []
    for schedule in found:
        row = progress.get(schedule.name)
        last_task = row.last_task_id if row is not None else None
        rows.append({
            'name': schedule.name, 'task': schedule.task_path, 'schedule': schedule.describe(),
            'kind': 'cron' if schedule.is_cron else 'interval', 'tz': schedule.tz,
            'catch_up': schedule.catch_up,
            'queue': schedule.queue or schedule.task_class.queue,
            'args': _json(list(schedule.args)), 'kwargs': _json(dict(schedule.kwargs)),
            'next_runs': [iso(tick) for tick in schedule.upcoming(now, count)],
            'last_tick': iso(row.last_tick) if row is not None else None,
            'last_task_id': last_task,
            'last_task_status': statuses.get(last_task) if last_task else None,
            'last_published_at': iso(row.last_published_at) if row is not None else None})
    leader = None
    if lease is not None and lease.expires_at > now:
        leader = {'holder': lease.holder, 'since': iso(lease.acquired_at),
                  'expires_at': iso(lease.expires_at)}
    return {'schedules': rows, 'searched': found.searched, 'records': bool(
        records_url or config.RECORDS_URL), 'leader': leader}


def run_now(config: Config, name: str, publisher: Optional[Publisher] = None) -> str:
    """Publish one run of the schedule called ``name`` now, with a task id of
    its own (not a tick's: the schedule's ticks go on as before)."""
    schedule = get_schedules(config).get(name)
    return publish_run(publisher or get_publisher(), schedule)
