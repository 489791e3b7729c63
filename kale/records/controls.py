"""Operators' controls of running workers, kept in the task records:
:func:`pause_queue`, :func:`resume_queue`, :func:`stop_worker`, read by the
workers with their heartbeat (:mod:`kale.worker.control`); the CLI and the
web routes call these (docs/explanation/internals-records.md)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from kale import records
from kale.default import default_app
from kale.exceptions import RecordConflictError, RecordNotFoundError
from kale.statuses import WorkerState
from kale.store.controls import ControlStore
from kale.store.record import WorkerRecord, iso

if TYPE_CHECKING:
    from kale.app import App


def _controls(app: Optional['App']) -> ControlStore:
    return (app or default_app()).store.controls


def _queue_name(name: str, app: Optional['App']) -> str:
    """The queue's name, once the queue config has it (UnknownQueueError else)."""
    return (app or default_app()).queues.get_queue(name).name


def pause_queue(name: str, app: Optional['App'] = None) -> dict[str, Any]:
    """Pause the queue ``name``: every worker stops receiving from it within
    a few seconds; its messages wait in SQS. The queue and since when."""
    queue = _queue_name(name, app)
    since = _controls(app).pause(queue, time.time())
    return {'queue': queue, 'paused': True, 'paused_at': iso(since)}


def resume_queue(name: str, app: Optional['App'] = None) -> dict[str, Any]:
    """Resume the queue ``name`` (whether it was paused is ``was_paused``)."""
    queue = _queue_name(name, app)
    was = _controls(app).resume(queue)
    return {'queue': queue, 'paused': False, 'was_paused': was}


def paused_queues(app: Optional['App'] = None) -> dict[str, float]:
    """The paused queues, and since when (epoch seconds)."""
    return _controls(app).paused()


def find_worker(id_or_prefix: str, app: Optional['App'] = None) -> WorkerRecord:
    """The worker (or supervisor) whose id is, or starts with, ``id_or_prefix``
    (``host:pid`` will do). RecordNotFoundError when none, RecordConflictError
    when several that have not stopped do."""
    several = _candidates(records.queries(app).workers(), id_or_prefix)
    if not several:
        raise RecordNotFoundError('no worker recorded as %s (kale workers lists them)'
                                  % id_or_prefix[:200])
    if len(several) > 1:
        raise RecordConflictError('%d workers have ids that start with %s: %s' % (
            len(several), id_or_prefix[:200], ', '.join(w.id for w in several[:3])))
    return several[0]


def _candidates(found: list[WorkerRecord], id_or_prefix: str) -> list[WorkerRecord]:
    """The worker of that id; else those whose id starts so and have not
    stopped; else those that have."""
    matching = [w for w in found if w.id.startswith(id_or_prefix)] if id_or_prefix else []
    return [w for w in found if w.id == id_or_prefix][:1] or [
        w for w in matching if w.state != WorkerState.STOPPED] or matching


def stop_worker(id_or_prefix: str, app: Optional['App'] = None) -> dict[str, Any]:
    """Ask a worker to stop: it receives no more, lets what runs finish and
    exits 0 (a supervisor stops its workers). Its row, with
    ``stop_requested_at``. RecordConflictError when it has stopped."""
    worker = find_worker(id_or_prefix, app)
    if worker.state == WorkerState.STOPPED:
        raise RecordConflictError('worker %s stopped at %s: there is nothing to stop'
                                  % (worker.id, iso(worker.stopped_at)))
    asked = _controls(app).ask_stop(worker.id, time.time())
    return dict(worker.as_json(), stop_requested_at=iso(asked))


def workers(state: Optional[str] = None, app: Optional['App'] = None) -> list[dict[str, Any]]:
    """The workers' rows as JSON, each with ``stop_requested_at`` (None: no
    stop was asked of it, or it has stopped)."""
    found = records.queries(app).workers(state)
    stops = _controls(app).stops()
    return [dict(w.as_json(), stop_requested_at=iso(stops.get(w.id))
                 if w.state != WorkerState.STOPPED else None) for w in found]
