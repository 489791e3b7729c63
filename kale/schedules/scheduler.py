"""The scheduler: publishes each schedule's ticks while it holds the lease
(the lease, missed ticks and catch_up: docs/explanation/internals-workflow.md,
"The scheduler's lease"), alone or beside a worker (``kale worker --scheduler``);
what is scheduled, as ``kale schedules list`` and ``/api/schedules`` show it."""
from __future__ import annotations

import collections
import json
import logging
import math
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.events import process_identity
from kale.exceptions import KaleError, ScheduleError
from kale.hooks import WorkerHooks
from kale.publisher import Publisher
from kale.schedules.discovery import NOTHING_TO_SEARCH, Schedules
from kale.schedules.spec import CATCH_UP_ALL_MAX, SCHEDULE_LABEL, Schedule, fifo_group, tick_id
from kale.store.record import iso
from kale.store.schedules import Lease, Progress, ScheduleStore

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger('kale.schedules')

#: Seconds before retrying a tick whose publish failed.
RETRY_SEC = 1.0
#: Published ticks a scheduler remembers (for its tests and its owner).
PUBLISHED_KEPT = 1000
#: Next run times listed for each schedule.
NEXT_RUNS = 3


def publish_run(publisher: Publisher, schedule: Schedule,
                task_id: Optional[str] = None) -> str:
    """Publish one run of ``schedule`` (as ``task_id``, else a new id),
    labelled with its schedule's name; its task id."""
    queue = publisher.queue_of(schedule.task_class, schedule.queue)
    return publisher.publish_batch(
        schedule.task_class, None, [(schedule.args, dict(schedule.kwargs))],
        labels={SCHEDULE_LABEL: schedule.name}, queue_name=schedule.queue,
        group_id=fifo_group(schedule.name) if queue.fifo else None,
        task_ids=[task_id] if task_id is not None else None)[0]


def records_state(app: 'App') -> ScheduleStore:
    """The schedulers' state in ``app``'s task records; ScheduleError without them."""
    if not app.config.RECORDS_URL:
        raise ScheduleError("the scheduler keeps its lease and each schedule's last tick in the "
                            "task records: set RECORDS_URL (a SQLite file on one machine, e.g. "
                            "'sqlite:///kale-records.db'; PostgreSQL for schedulers on several)")
    return app.store.schedules


def runnable_schedules(app: 'App') -> Schedules:
    """The schedules a scheduler of ``app`` runs (the broken ones aside, see
    :meth:`Scheduler.run`); ScheduleError, in one line, when none can run."""
    found = app.schedules
    if not found.searched:
        raise ScheduleError(NOTHING_TO_SEARCH)
    if not len(found) and found.broken:
        raise ScheduleError('no schedule can run: %d broken: %s' % (
            len(found.broken), '; '.join(broken.error for broken in found.broken)))
    if not len(found):
        raise ScheduleError('no schedules: no task class of TASK_MODULES (%s) says schedule = '
                            '..., and SCHEDULES is empty' % ', '.join(app.config.TASK_MODULES))
    return found


class Scheduler:
    """Leads or follows; while leading, publishes each due tick once."""

    def __init__(self, schedules: Schedules, state: ScheduleStore, lease_sec: float,
                 publisher: Publisher, clock: Clock = SYSTEM_CLOCK,
                 holder: Optional[str] = None,
                 wait: Optional[Callable[[float], bool]] = None):
        self.schedules = schedules
        self.state = state
        self.lease_sec = float(lease_sec)
        self.publisher = publisher
        self.clock = clock
        self.holder = holder or process_identity()[0]
        self._stop = threading.Event()
        #: Waits up to its argument in seconds; True once the scheduler stops
        #: (a test's waits move its clock instead).
        self._wait = wait or self._stop.wait
        self._lease: Optional[Lease] = None
        self._leading_since: Optional[float] = None
        self._lease_until = 0.0
        self._next_lease_round = 0.0
        self._retry_at = math.inf
        self._lease_error = False
        #: (schedule name, tick, task id) of the last ticks this scheduler published.
        self.published: collections.deque[tuple[str, float, str]] = collections.deque(
            maxlen=PUBLISHED_KEPT)

    @property
    def leading(self) -> bool:
        return self.clock.time() < self._lease_until

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Lead or follow until :meth:`stop`; gives the lease up on the way out."""
        logger.info('scheduler %s: %d schedules (%s); lease %g s', self.holder,
                    len(self.schedules), ', '.join(s.name for s in self.schedules),
                    self.lease_sec)
        for broken in self.schedules.broken:
            logger.error('scheduler %s: broken, not run (the other schedules run): %s',
                         self.holder, broken.error)
        self.warm_up()
        try:
            while not self._wait(self.step()):      # one round at least, even if stopped at once
                pass
        finally:
            if self._lease_until > self.clock.time():
                try:
                    self.state.release(self.holder, self.clock.time())
                except KaleError as exc:
                    logger.warning('scheduler %s: could not give the lease up: %s',
                                   self.holder, exc)
            logger.info('scheduler %s: stopped', self.holder)

    def warm_up(self) -> None:
        """Make what publishing needs (the client, the publish hooks, the
        queues), so that a scheduler that comes to lead publishes at once."""
        publisher = self.publisher
        try:
            _ = getattr(publisher, 'hooks', None)
            declare = getattr(getattr(publisher, 'sender', None), 'declare', None)
            for schedule in self.schedules:
                if declare is not None:
                    declare(publisher.queue_of(schedule.task_class, schedule.queue))
        except Exception as exc:             # the first publish says so again
            logger.warning('scheduler %s: publishing is not ready yet: %s: %s', self.holder,
                           type(exc).__name__, exc)

    def step(self) -> float:
        """One round: the lease when due, then the due ticks while leading;
        the seconds until the next round."""
        now = self.clock.time()
        if now >= self._next_lease_round:
            self._lease_round(now)
        now = self.clock.time()
        wake = self._next_lease_round
        if now < self._lease_until:
            self._retry_at = math.inf
            try:
                self._publish_due(now)
            except KaleError as exc:           # the records store is down: next round
                logger.warning('scheduler %s: ticks not published: %s', self.holder, exc)
                self._retry_at = now + RETRY_SEC
            now = self.clock.time()
            wake = min(wake, self._retry_at, self._lease_until,
                       *(schedule.next_after(now) for schedule in self.schedules))
        return max(0.0, wake - self.clock.time())

    def _lease_round(self, now: float) -> None:
        self._next_lease_round = now + self.lease_sec / 4
        try:
            mine, lease = self.state.acquire(self.holder, now, self.lease_sec * 3 / 4)
        except KaleError as exc:
            if not self._lease_error:       # said once, until it works again
                logger.warning('scheduler %s: the lease cannot be renewed: %s%s', self.holder,
                               exc, ' (publishing stops when it ends)' if self.leading else '')
            self._lease_error = True
            return
        self._lease_error = False
        was_leading = self._leading_since is not None and now < self._lease_until
        if mine and lease is not None:
            self._lead(lease, was_leading, now)
        else:
            self._follow(lease, was_leading, now)
        self._lease = lease

    def _lead(self, lease: Lease, was_leading: bool, now: float) -> None:
        """Hold ``lease``; a lease newly taken starts the schedules' progress."""
        if not was_leading or lease.acquired_at != self._leading_since:
            logger.info('scheduler %s leads, for %d schedules', self.holder,
                        len(self.schedules))
            self.state.start([(s.name, s.task_path) for s in self.schedules], now)
        self._leading_since = lease.acquired_at
        self._lease_until = lease.expires_at

    def _follow(self, lease: Optional[Lease], was_leading: bool, now: float) -> None:
        """Follow ``lease``'s holder, and try to take over as soon as it ends."""
        if was_leading or self._lease is None or (lease is not None
                                                  and lease.holder != self._lease.holder):
            logger.info('scheduler %s follows %s', self.holder,
                        lease.holder if lease is not None else 'nobody')
        self._leading_since = None
        self._lease_until = 0.0
        if lease is not None and lease.expires_at > now:    # take over as it ends
            self._next_lease_round = min(self._next_lease_round, lease.expires_at + 0.001)

    def _publish_due(self, now: float) -> None:
        progress = self.state.progress()
        since = self._leading_since if self._leading_since is not None else now
        for schedule in self.schedules:
            row = progress.get(schedule.name)
            if row is None:                  # added since this scheduler started leading
                self.state.start([(schedule.name, schedule.task_path)], now)
                continue
            due = schedule.ticks_between(row.watermark, now, CATCH_UP_ALL_MAX + 1)
            if due:
                self._publish_ticks(schedule, row, due, since, now)

    def _publish_ticks(self, schedule: Schedule, row: Progress, due: list[float],
                       since: float, now: float) -> None:
        chosen = _chosen_ticks(schedule, due, since)
        if not chosen:
            self.state.skip(schedule.name, self.holder, due[-1], now)
        for tick in chosen:
            after = self._publish_tick(schedule, row, tick, now)
            if after is None:
                return
            row = after

    def _publish_tick(self, schedule: Schedule, row: Progress, tick: float,
                      now: float) -> Optional[Progress]:
        """Claim and publish one tick; the schedule's row after it (None when
        it was not published)."""
        task_id = tick_id(schedule.name, tick)
        if not self.state.claim(schedule.name, self.holder, tick, task_id, now):
            return None                   # done meanwhile, or the lease was lost
        try:
            published = publish_run(self.publisher, schedule, task_id)
        except Exception as exc:
            logger.error('schedule %s: the tick of %s could not be published (tried again in '
                         '%g s): %s: %s', schedule.name, iso(tick), RETRY_SEC,
                         type(exc).__name__, exc)
            self.state.unclaim(row, tick, task_id)
            self._retry_at = now + RETRY_SEC
            return None
        if published != task_id:          # the task's unique_for_sec: an earlier run holds it
            logger.info('schedule %s: tick of %s not sent: task %s (unique_for_sec) still '
                        'waits or runs', schedule.name, iso(tick), published)
        else:
            logger.info('schedule %s: published the tick of %s as task %s', schedule.name,
                        iso(tick), task_id)
        self.published.append((schedule.name, tick, published))
        return Progress(schedule.name, tick, tick, task_id, now)


def _chosen_ticks(schedule: Schedule, due: list[float], since: float) -> list[float]:
    """The ticks of ``due`` to publish, by the schedule's ``catch_up``: those
    at or before ``since`` were missed."""
    missed = [tick for tick in due if tick <= since]
    on_time = due[len(missed):]
    if schedule.catch_up == 'all':
        if len(due) > CATCH_UP_ALL_MAX:
            logger.warning('schedule %s: more than %d ticks were missed; publishing the '
                           'latest %d', schedule.name, CATCH_UP_ALL_MAX, CATCH_UP_ALL_MAX)
        return due[-CATCH_UP_ALL_MAX:]
    chosen = missed[-1:] + on_time if schedule.catch_up == 'last' else on_time
    skipped = len(due) - len(chosen)
    if skipped:
        logger.info('schedule %s: %d missed ticks skipped (catch_up %r)', schedule.name,
                    skipped, schedule.catch_up)
    return chosen


def make_scheduler(app: 'App', clock: Optional[Clock] = None, **options: Any) -> Scheduler:
    """A scheduler of ``app``'s schedules, with its lease in ``app``'s store,
    publishing through ``app``'s publisher (ScheduleError in one line without
    records or schedules)."""
    found = runnable_schedules(app)
    return Scheduler(found, records_state(app), float(app.config.SCHEDULER_LEASE_SEC),
                     publisher=app.publisher, clock=clock or app.clock, **options)


class SchedulerHooks(WorkerHooks):
    """Runs a scheduler beside the worker (one with no records or no
    schedules does not start, saying why in one line)."""

    def __init__(self) -> None:
        self.scheduler: Optional[Scheduler] = None
        self._thread: Optional[threading.Thread] = None

    def on_worker_startup(self, worker: Any) -> None:
        self.scheduler = make_scheduler(worker.app, clock=getattr(worker, 'clock', SYSTEM_CLOCK))
        self._thread = threading.Thread(target=self.scheduler.run, name='kale-scheduler',
                                        daemon=True)
        self._thread.start()

    def on_worker_shutdown(self, worker: Any) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
        if self._thread is not None:
            self._thread.join(10)
        self.scheduler = self._thread = None


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
