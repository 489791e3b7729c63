"""What each ``/api`` route does: read the request, ask the records or the
queues, return a JSON-ready value. Errors are KaleErrors; the app turns
them into one-line JSON answers with the right status."""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Optional

from starlette.requests import Request

from kale import admin, records, workflow
from kale.admin import serving_workers
from kale.app import App
from kale.broker import Broker
from kale.exceptions import (
    BadFilterError,
    NotAllowedError,
    RecordConflictError,
    RecordNotFoundError,
    RecordsError,
)
from kale.records import controls
from kale.records.queries import parse_filter, parse_limit
from kale.statuses import WorkflowStatus
from kale.store.record import iso
from kale.store.records import RecordQueries
from kale.web.pages import workflow_page
from kale.webhooks import store as webhooks

#: The windows ``/api/timeline?window=auto`` tries, shortest first.
AUTO_WINDOWS_SEC = (3600, 24 * 3600, 7 * 24 * 3600)


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, 'false').lower()
    if value not in ('true', 'false', '1', '0', 'yes', 'no'):
        raise BadFilterError('%s must be true or false, got %r' % (name, value))
    return value in ('true', '1', 'yes')


def _number(request: Request, name: str, default: float, low: float, high: float) -> float:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float('nan')
    if not low <= value <= high:
        raise BadFilterError('%s must be a number from %g to %g, got %r' % (name, low, high, text))
    return value


def _page(request: Request) -> tuple[int, Optional[str]]:
    """The ``limit`` and ``cursor`` of a paged list."""
    return parse_limit(request.query_params.get('limit')), request.query_params.get('cursor') or None


def _token_needed(what: str) -> NotAllowedError:
    return NotAllowedError('%s needs a bearer token: start kale web with WEB_TOKEN (or '
                           'KALE_WEB_TOKEN) set, or set WEB_ALLOW_SUBMIT_WITHOUT_TOKEN = True '
                           'for local use' % what)


def _on_path(name: str, action: Callable[..., Any]) -> Callable[['Api', Request], Any]:
    """A route whose answer is ``action(the path parameter name, app)``."""
    def handle(api: 'Api', request: Request) -> Any:
        return action(request.path_params[name], api.app)
    handle.__name__ = action.__name__
    return handle


def _on_workflow(action: Callable[..., Any]) -> Callable[['Api', Request], Any]:
    """A route whose answer is ``action(the workflow_id, app=app).describe()``."""
    def handle(api: 'Api', request: Request) -> Any:
        records.store(app=api.app)
        return action(request.path_params['workflow_id'], app=api.app).describe()
    return handle


def _over_window(request: Request, ask: Callable[[float, int], dict[str, Any]],
                 default: Optional[str]) -> dict[str, Any]:
    """``ask(window, bucket)`` of the request; ``window=auto``: the shortest of
    an hour, a day and a week with any series (a quiet system's chart still
    shows its last work)."""
    if request.query_params.get('window', default) == 'auto':
        for window_sec in AUTO_WINDOWS_SEC:
            answer = ask(window_sec, window_sec // 60)
            if answer['series']:
                break
        return answer
    window = _number(request, 'window', 3600, 60, 7 * 24 * 3600)
    return ask(window, int(_number(request, 'bucket', max(60, window // 60), 1, 24 * 3600)))


class Api:
    """The routes' work, on one app's records and queues."""

    def __init__(self, app: App, broker: Optional[Callable[[], Broker]] = None,
                 submit_allowed: bool = False):
        #: The app served: its records, queues, workflows and schedules.
        self.app = app
        #: POST /api/workflows is served (a token guards the API, or the
        #: operator allowed submitting without one).
        self.submit_allowed = submit_allowed
        self._make_broker = broker or (lambda: app.command_broker)
        self._broker: Optional[Broker] = None
        self._registry: Any = None          # /metrics' registry, made at the first scrape
        self._outbox: Optional[tuple[str, Any]] = None     # (OUTBOX_URL, its outbox store)
        self._lock = threading.Lock()

    @property
    def queries(self) -> RecordQueries:
        return records.queries(self.app)

    @property
    def broker(self) -> Broker:
        with self._lock:
            return self._broker_unlocked()

    def _broker_unlocked(self) -> Broker:
        if self._broker is None:
            self._broker = self._make_broker()
        return self._broker

    # --- tasks ------------------------------------------------------------------

    def list_tasks(self, request: Request) -> dict[str, Any]:
        page, cursor = self.queries.page(parse_filter(request.query_params), *_page(request))
        return {'tasks': [record.as_json(detail=False) for record in page], 'next': cursor}

    def get_task(self, request: Request) -> dict[str, Any]:
        """The record, found by its id or a unique prefix of it, with every attempt."""
        task_id = records.resolve(request.path_params['task_id'], app=self.app)
        record = records.get(task_id, app=self.app)
        if record is None:
            raise RecordNotFoundError('no record of task %s' % task_id[:200])
        answer = record.as_json()
        answer['attempt_history'] = [
            dict(attempt, started_at=iso(attempt['started_at']),
                 finished_at=iso(attempt['finished_at']))
            for attempt in records.attempts(task_id, app=self.app)]
        return answer

    def count_tasks(self, request: Request) -> dict[str, Any]:
        return {'count': self.queries.count(parse_filter(request.query_params))}

    def summary(self, request: Request) -> dict[str, Any]:
        return self.queries.summary(parse_filter(request.query_params))

    def delete_tasks(self, request: Request) -> dict[str, Any]:
        where = parse_filter(request.query_params)
        if where.empty and not _flag(request, 'all'):
            raise BadFilterError('refusing to delete every record: give a filter, or all=true')
        return {'deleted': self.queries.delete(where)}

    def retry_task(self, request: Request) -> dict[str, Any]:
        """Publish the task again; its record is written before the answer, so
        whoever reads it next (any process) finds it."""
        task_id = records.resolve(request.path_params['task_id'], app=self.app)
        new_id, published = records.retry_reporting(task_id, app=self.app)
        self.app.recorder.flush_process()
        return {'id': new_id, 'retry_of': task_id, 'published': published}

    def retry_tasks(self, request: Request) -> dict[str, Any]:
        """Retry every failed task the filter matches (status failed unless
        the filter names cancelled), each once, at most BULK_RETRY_MAX."""
        return records.retry_matching(parse_filter(request.query_params), app=self.app)

    def cancel_task(self, request: Request) -> dict[str, Any]:
        task_id = records.resolve(request.path_params['task_id'], app=self.app)
        return records.cancel(task_id, app=self.app).as_json()

    def timeline(self, request: Request) -> dict[str, Any]:
        """Tasks finished over a window."""
        return _over_window(request, self.queries.timeline, None)

    def activity(self, request: Request) -> dict[str, Any]:
        """Runs that ended over a window by outcome (retries too) and their
        mean duration, per queue or per task; ``window=auto`` by default."""
        by = request.query_params.get('by', 'queue')
        return _over_window(request, lambda *window: self.queries.activity(by, *window), 'auto')

    # --- workflows (their state is in the records: off, they answer as the task routes do) --

    def list_workflows(self, request: Request) -> dict[str, Any]:
        records.store(app=self.app)
        rows, cursor = workflow_page(request.query_params.get('status') or None, *_page(request),
                                     self.app)
        return {'workflows': rows, 'next': cursor}

    get_workflow = _on_workflow(workflow.get)
    retry_workflow = _on_workflow(workflow.retry)

    def submit_workflow(self, request: Request, body: bytes) -> dict[str, Any]:
        """Submit tasks or a workflow written as JSON (kale.submission); the
        workflow id and each entry's task id. Only with a bearer token set, or
        WEB_ALLOW_SUBMIT_WITHOUT_TOKEN."""
        if not self.submit_allowed:
            raise _token_needed('submitting')
        from kale import submission
        return submission.submit(submission.parse(body), self.app)

    def outbox(self, request: Request) -> dict[str, Any]:
        """The outbox of OUTBOX_URL: rows waiting for the relay, and the
        oldest one's age (``configured`` false without OUTBOX_URL)."""
        url = self.app.config.OUTBOX_URL
        if not url:
            return {'configured': False}
        from kale.store.sql.outbox import SQLOutbox
        from kale.store.sql.outbox_schema import open_database
        with self._lock:
            if self._outbox is None or self._outbox[0] != url:
                self._outbox = (url, SQLOutbox(open_database(url)))
            store = self._outbox[1]
        count, oldest = store.pending(time.time(), url)
        return {'configured': True, 'pending': count,
                'oldest_age_sec': round(oldest, 3) if oldest is not None else None}

    def cancel_workflow(self, request: Request) -> dict[str, Any]:
        """Cancel every node of a running workflow that has not ended; the
        workflow as it is then."""
        records.store(app=self.app)
        found = workflow.get(request.path_params['workflow_id'], app=self.app)
        status = found.status()
        if status is not WorkflowStatus.RUNNING:
            raise RecordConflictError('workflow %s is %s: only a running workflow can be '
                                      'cancelled' % (found.id[:200], status))
        return workflow.cancel(found.id, app=self.app).describe()

    # --- queues and workers --------------------------------------------------------------

    def queues(self, request: Request) -> dict[str, Any]:
        """Each queue's counts, throughput over the last minute and whether
        it is paused (records off: none is)."""
        statuses = admin.queue_statuses(self.broker)
        try:
            last_minute = self.queries.timeline(60, 60)['queues_last_minute']
            paused = controls.paused_queues(self.app)
        except RecordsError:
            last_minute, paused = {}, {}
        return {'queues': [dict(status.as_dict(), throughput_per_min=last_minute.get(status.name, 0),
                                paused_at=iso(paused.get(status.name))) for status in statuses]}

    pause_queue = _on_path('name', controls.pause_queue)
    resume_queue = _on_path('name', controls.resume_queue)

    def purge(self, request: Request) -> dict[str, Any]:
        """Delete every message of the queue (SQS PurgeQueue), only when
        ``confirm`` repeats its name; its waiting records become purged."""
        broker = self.broker
        queue = broker.queues.get_queue(request.path_params['name'])
        if request.query_params.get('confirm') != queue.name:
            raise BadFilterError('purging queue %s deletes every message in it: repeat its name '
                                 'as confirm=%s' % (queue.name, queue.name))
        before = time.time()
        admin.purge(broker, queue)
        marked = records.mark_purged(queue.name, before, app=self.app)
        return {'queue': queue.name, 'purged': True, 'records_marked_purged': marked}

    def redrive(self, request: Request) -> dict[str, Any]:
        broker = self.broker
        queue = broker.queues.get_queue(request.path_params['name'])
        limit, dry_run = request.query_params.get('limit'), _flag(request, 'dry_run')
        report = admin.redrive(broker, queue, limit=parse_limit(limit) if limit else None,
                               reason=request.query_params.get('reason') or None, dry_run=dry_run)
        return {'queue': queue.name, 'moved': report.moved, 'skipped': report.skipped,
                'not_matching': report.not_matching, 'reasons': report.reasons, 'dry_run': dry_run}

    def metrics(self, accept: Optional[str]) -> tuple[bytes, str]:
        """``/metrics``: the queue gauges (read from SQS at each scrape) and the
        records' task counts by status and oldest queued task per queue, as
        (body, content type). ImportError without prometheus_client."""
        from kale.contrib import queue_metrics  # imports prometheus_client
        with self._lock:
            if self._registry is None:
                self._registry = queue_metrics.queue_registry(
                    self._broker_unlocked(), task_counts=lambda: self.queries.counts_by_status(),
                    oldest_queued=lambda: self.queries.oldest_queued(),
                    workers=lambda: serving_workers(self.queries))
            registry = self._registry
        return queue_metrics.render(registry, accept)

    def workers(self, request: Request) -> dict[str, Any]:
        state = request.query_params.get('state') or None
        return {'workers': controls.workers(state, self.app)}

    stop_worker = _on_path('worker_id', controls.stop_worker)

    # --- schedules ------------------------------------------------------------------------

    def list_schedules(self, request: Request) -> dict[str, Any]:
        from kale.schedules.scheduler import describe
        return describe(self.app, public=True)

    def run_schedule(self, request: Request) -> dict[str, Any]:
        """Publish one run of the schedule now; its record is written before
        the answer when records are on."""
        from kale.schedules.scheduler import run_now
        name = request.path_params['name']
        task_id = run_now(self.app, name)
        if self.app.config.RECORDS_URL:
            self.app.recorder.flush_process()
        return {'schedule': name, 'task_id': task_id}

    # --- webhooks -------------------------------------------------------------------------

    def list_webhooks(self, request: Request) -> dict[str, Any]:
        found = webhooks.list_webhooks(request.query_params.get('topic') or None, app=self.app)
        return {'webhooks': [hook.as_json() for hook in found]}

    def add_webhook(self, request: Request, body: bytes) -> dict[str, Any]:
        """Add a webhook (it sends events to a URL of the caller's choice: only
        with a bearer token set, or WEB_ALLOW_SUBMIT_WITHOUT_TOKEN); the answer
        holds its secret, once."""
        if not self.submit_allowed:
            raise _token_needed('adding a webhook')
        try:
            fields = json.loads(body)
        except ValueError:
            fields = None
        if not isinstance(fields, dict) or not {'topic', 'url'} <= set(fields) or set(fields) - {
                'topic', 'url', 'method', 'headers', 'labels'}:
            raise BadFilterError('a webhook is a JSON object with topic and url, and optionally '
                                 'method, headers and labels')
        from kale.webhooks.fanout import subscription_of
        hook = webhooks.add(fields['topic'], fields['url'], fields.get('method') or 'POST',
                            fields.get('headers'), fields.get('labels'), app=self.app)
        return dict(hook.as_json(with_secret=True), subscribed=subscription_of(hook.topic,
                                                                               self.app))

    def remove_webhook(self, request: Request) -> dict[str, Any]:
        webhooks.remove(request.path_params['webhook_id'], app=self.app)
        return {'deleted': request.path_params['webhook_id']}

    disable_webhook = _on_path('webhook_id', lambda hook_id, app: webhooks.set_active(
        hook_id, False, app=app).as_json())
    enable_webhook = _on_path('webhook_id', lambda hook_id, app: webhooks.set_active(
        hook_id, True, app=app).as_json())

    def test_webhook(self, request: Request) -> dict[str, Any]:
        from kale.webhooks.fanout import send_test
        return {'task_id': send_test(request.path_params['webhook_id'], app=self.app)}
