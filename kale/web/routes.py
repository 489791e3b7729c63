"""What each ``/api`` route does: read the request, ask the records or the
queues, return a JSON-ready value. Errors are KaleErrors; the app turns
them into one-line JSON answers with the right status."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from starlette.requests import Request

from kale import admin, records
from kale.broker import Broker
from kale.exceptions import BadFilterError, RecordNotFoundError, RecordsError
from kale.records.queries import Queries, parse_filter, parse_limit
from kale.records.record import iso
from kale.records.recorder import get_recorder

#: The windows ``/api/timeline?window=auto`` tries, shortest first.
AUTO_WINDOWS_SEC = (3600, 24 * 3600, 7 * 24 * 3600)


def command_broker() -> Broker:
    """A broker whose client gives up soon on an endpoint that does not answer."""
    from kale.transport.sqs import SQSTransport, make_client
    return Broker.from_settings(SQSTransport(make_client(for_commands=True)))


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


class Api:
    """The routes' work, on one records store and one broker."""

    def __init__(self, records_url: Optional[str],
                 broker: Optional[Callable[[], Broker]] = None):
        self.records_url = records_url
        self._make_broker = broker or command_broker
        self._broker: Optional[Broker] = None
        self._registry: Any = None          # /metrics' registry, made at the first scrape
        self._lock = threading.Lock()

    @property
    def queries(self) -> Queries:
        return records.queries(self.records_url)

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
        params = request.query_params
        where = parse_filter(params)
        page, cursor = self.queries.page(where, parse_limit(params.get('limit')),
                                         params.get('cursor') or None)
        return {'tasks': [record.as_json(detail=False) for record in page], 'next': cursor}

    def get_task(self, request: Request) -> dict[str, Any]:
        """The record, found by its id or a unique prefix of it, with every attempt."""
        task_id = records.resolve(request.path_params['task_id'], self.records_url)
        record = records.get(task_id, self.records_url)
        if record is None:
            raise RecordNotFoundError('no record of task %s' % task_id[:200])
        answer = record.as_json()
        answer['attempt_history'] = [
            dict(attempt, started_at=iso(attempt['started_at']),
                 finished_at=iso(attempt['finished_at']))
            for attempt in records.attempts(task_id, self.records_url)]
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
        task_id = records.resolve(request.path_params['task_id'], self.records_url)
        new_id, published = records.retry_reporting(task_id, self.records_url)
        get_recorder(self.records_url).flush(timeout=5.0)
        return {'id': new_id, 'retry_of': task_id, 'published': published}

    def retry_tasks(self, request: Request) -> dict[str, Any]:
        """Retry every failed task the filter matches (status failed unless
        the filter names cancelled), each once, at most BULK_RETRY_MAX."""
        return records.retry_matching(parse_filter(request.query_params), self.records_url)

    def cancel_task(self, request: Request) -> dict[str, Any]:
        task_id = records.resolve(request.path_params['task_id'], self.records_url)
        return records.cancel(task_id, self.records_url).as_json()

    def timeline(self, request: Request) -> dict[str, Any]:
        """Tasks finished over a window; ``window=auto``: the shortest of an
        hour, a day and a week in which any finished (a quiet system's
        chart still shows its last work)."""
        if request.query_params.get('window') == 'auto':
            answer: dict[str, Any] = {}
            for window_sec in AUTO_WINDOWS_SEC:
                answer = self.queries.timeline(window_sec, window_sec // 60)
                if answer['series']:
                    break
            return answer
        window = _number(request, 'window', 3600, 60, 7 * 24 * 3600)
        bucket = int(_number(request, 'bucket', max(60, window // 60), 1, 24 * 3600))
        return self.queries.timeline(window, bucket)

    # --- queues and workers --------------------------------------------------------------

    def queues(self, request: Request) -> dict[str, Any]:
        statuses = admin.queue_statuses(self.broker)
        try:
            last_minute = self.queries.timeline(60, 60)['queues_last_minute']
        except RecordsError:
            last_minute = {}
        rows = []
        for status in statuses:
            row = status.as_dict()
            row['throughput_per_min'] = last_minute.get(status.name, 0)
            rows.append(row)
        return {'queues': rows}

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
        marked = records.mark_purged(queue.name, before, self.records_url)
        return {'queue': queue.name, 'purged': True, 'records_marked_purged': marked}

    def redrive(self, request: Request) -> dict[str, Any]:
        broker = self.broker
        queue = broker.queues.get_queue(request.path_params['name'])
        limit = request.query_params.get('limit')
        report = admin.redrive(broker, queue, limit=parse_limit(limit) if limit else None,
                               reason=request.query_params.get('reason') or None,
                               dry_run=_flag(request, 'dry_run'))
        return {'queue': queue.name, 'moved': report.moved, 'skipped': report.skipped,
                'not_matching': report.not_matching, 'reasons': report.reasons,
                'dry_run': _flag(request, 'dry_run')}

    def metrics(self, accept: Optional[str]) -> tuple[bytes, str]:
        """``/metrics``: the queue gauges (read from SQS at each scrape) and the
        records' task counts by status and oldest queued task per queue, as
        (body, content type). ImportError without prometheus_client."""
        from kale.contrib import queue_metrics  # imports prometheus_client
        with self._lock:
            if self._registry is None:
                self._registry = queue_metrics.queue_registry(
                    self._broker_unlocked(), task_counts=lambda: self.queries.counts_by_status(),
                    oldest_queued=lambda: self.queries.oldest_queued())
            registry = self._registry
        return queue_metrics.render(registry, accept)

    def workers(self, request: Request) -> dict[str, Any]:
        state = request.query_params.get('state') or None
        return {'workers': [w.as_json() for w in self.queries.workers(state)]}
