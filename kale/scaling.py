"""Autoscaling signals: what a fleet of workers should be sized on, per queue
(docs/explanation/internals-top.md, "Autoscaling signals")."""
from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any, Callable, Optional

from kale.admin import QueueStatus, queue_statuses
from kale.broker import Broker
from kale.statuses import WorkerState


@dataclasses.dataclass
class QueueSignals(QueueStatus):
    """One queue's figures: its row of ``kale queues`` and these (None where
    unknown: no records and no CloudWatch value, no worker)."""

    #: Seconds the oldest waiting task has waited, and where that came from
    #: ('records' or 'cloudwatch').
    oldest_age_sec: Optional[float] = None
    oldest_from: Optional[str] = None
    #: Running worker processes serving the queue (records only).
    workers: Optional[int] = None
    backlog_per_worker: Optional[float] = None


def serving_workers(queries: Any, now: Optional[float] = None) -> dict[str, int]:
    """Running worker processes (not supervisors) by the queue names they serve,
    from the records' worker rows (``queries``: :func:`kale.records.queries`)."""
    serving: dict[str, int] = {}
    for worker in queries.workers(WorkerState.RUNNING, now):
        if worker.role == 'worker':
            for name in worker.queues:
                serving[name] = serving.get(name, 0) + 1
    return serving


def queue_signals(broker: Broker, queries: Any = None, now: Optional[float] = None,
                  cloudwatch: Optional[Callable[[list[str]], dict[str, float]]] = None
                  ) -> list[QueueSignals]:
    """Every configured queue's signals: ages and workers from the records'
    ``queries`` when given, else ages from ``cloudwatch`` (default: CloudWatch)."""
    now = time.time() if now is None else now
    rows = [QueueSignals(**status.as_dict()) for status in queue_statuses(broker)]
    if queries is not None:
        _add_from_records(rows, queries, now)
        return rows
    _add_from_cloudwatch(rows, _cloudwatch(broker, now) if cloudwatch is None else cloudwatch)
    return rows


def _add_from_records(rows: list[QueueSignals], queries: Any, now: float) -> None:
    """Fill in each queue's oldest task's age, its workers and its backlog per
    worker from the records."""
    oldest = queries.oldest_queued(now)
    serving = serving_workers(queries, now)
    for row in rows:
        _add_record_age(row, oldest, now)
        row.workers = serving.get(row.name, 0)
        if row.workers and row.visible is not None:
            row.backlog_per_worker = row.visible / row.workers


def _add_record_age(row: QueueSignals, oldest: dict[str, float], now: float) -> None:
    """Fill in the age of the queue's oldest waiting task (``oldest``: when each
    queue's became due); 0 for a queue with nothing waiting."""
    if row.name in oldest:
        row.oldest_age_sec, row.oldest_from = max(0.0, now - oldest[row.name]), 'records'
    elif row.visible == 0 and not row.delayed:
        row.oldest_age_sec, row.oldest_from = 0.0, 'records'


def _add_from_cloudwatch(rows: list[QueueSignals],
                         cloudwatch: Callable[[list[str]], dict[str, float]]) -> None:
    """Fill in the oldest message's age of each queue that exists, from ``cloudwatch``."""
    ages = cloudwatch([row.sqs_name for row in rows if row.visible is not None])
    for row in rows:
        if row.sqs_name in ages:
            row.oldest_age_sec, row.oldest_from = ages[row.sqs_name], 'cloudwatch'


def _cloudwatch(broker: Broker, now: float) -> Callable[[list[str]], dict[str, float]]:
    """CloudWatch's age of the oldest message at ``now``, by SQS name."""
    from kale.transport.cloudwatch import oldest_message_ages
    moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)

    def cloudwatch(names: list[str]) -> dict[str, float]:
        assert broker.config is not None, 'a broker of an app'
        return oldest_message_ages(names, moment, config=broker.config)
    return cloudwatch
