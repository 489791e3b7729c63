"""Queue gauges for a web app's ``/metrics``: what is waiting in SQS, and, when
records are kept, how many tasks are in each status (:func:`queue_registry`,
:func:`render`). See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from kale.exceptions import QueueNotFoundError, SQSError
from kale.statuses import TaskStatus, status_values

if TYPE_CHECKING:
    from kale.broker import Broker

logger = logging.getLogger(__name__)

STATES = ('visible', 'in_flight', 'delayed', 'dead_letters')
#: The label of series whose value read from stored data is not a configured
#: queue or a known status: stored data never makes a series of its own.
OTHER = 'other'
#: The record statuses that get a series of their own.
RECORD_STATUSES = frozenset(status_values(TaskStatus))


class QueueCollector:
    """A prometheus_client collector of every configured queue's message counts."""

    def __init__(self, broker: 'Broker',
                 task_counts: Optional[Callable[[], Mapping[str, int]]] = None,
                 oldest_queued: Optional[Callable[[], Mapping[str, float]]] = None,
                 clock: Callable[[], float] = time.time,
                 workers: Optional[Callable[[], Mapping[str, int]]] = None,
                 oldest_ages: Optional[Callable[[list[str]], Mapping[str, float]]] = None):
        self.broker = broker
        self.task_counts = task_counts
        self.oldest_queued = oldest_queued
        self.clock = clock
        self.workers = workers              # running workers by queue name
        self.oldest_ages = oldest_ages      # by SQS name, when oldest_queued is not given

    def describe(self) -> list[Metric]:
        """The families, without asking SQS (a registry calls this when the
        collector is registered)."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        messages, up, records, oldest, serving, backlog = self._families()
        visible = self._add_queue_counts(messages, up)
        yield messages
        yield up
        if self.workers is not None:
            self._add_workers(self.workers, serving, backlog, visible)
            yield serving
            yield backlog
        if self.oldest_queued is None and self.oldest_ages is not None:
            self._add_oldest_ages(self.oldest_ages, oldest, visible)
            yield oldest
        if self.task_counts is not None:
            self._add_bounded(records, self.task_counts, 'task counts', RECORD_STATUSES,
                              lambda total, count: total + int(count))
            yield records
        if self.oldest_queued is not None:
            now = self.clock()
            self._add_bounded(oldest, self.oldest_queued, 'oldest tasks', self.broker.queues,
                              lambda age, published: max(age, now - published))
            yield oldest

    def _add_queue_counts(self, messages: GaugeMetricFamily,
                          up: GaugeMetricFamily) -> dict[str, int]:
        """Add each queue's message counts and whether they were read; return
        the visible messages of the queues that were read, by queue name."""
        visible: dict[str, int] = {}
        for queue in self.broker.queues.values():
            counts = self._counts(queue)
            up.add_metric([queue.name], 0 if counts is None else 1)
            if counts is not None:
                visible[queue.name] = counts[0]
                for state, value in zip(STATES, counts, strict=True):
                    messages.add_metric([queue.name, state], value)
        return visible

    def _add_workers(self, workers: Callable[[], Mapping[str, int]],
                     serving: GaugeMetricFamily, backlog: GaugeMetricFamily,
                     visible: Mapping[str, int]) -> None:
        """Add the running workers of each queue and its backlog per worker."""
        found = self._call(workers, 'workers')
        for queue in self.broker.queues.values():
            count = int(found.get(queue.name, 0))
            serving.add_metric([queue.name], count)
            if count and queue.name in visible:
                backlog.add_metric([queue.name], visible[queue.name] / count)

    def _add_oldest_ages(self, oldest_ages: Callable[[list[str]], Mapping[str, float]],
                         oldest: GaugeMetricFamily, visible: Mapping[str, int]) -> None:
        """Add the oldest message's age of each queue that was read, by SQS name."""
        names = {self.broker.sqs_name(q): q.name for q in self.broker.queues.values()
                 if q.name in visible}
        for sqs_name, age in oldest_ages(sorted(names)).items():
            oldest.add_metric([names[sqs_name]], age)

    def _add_bounded(self, family: GaugeMetricFamily, source: Callable[[], Mapping[str, Any]],
                     what: str, known: Any, fold: Callable[[Any, Any], Any]) -> None:
        """Add ``source``'s values folded by label, those of a key not in ``known``
        under ``other`` (task counts summed, the oldest task's age the largest)."""
        by_label: dict[str, Any] = {}
        for key, value in self._call(source, what).items():
            label = str(key) if key in known else OTHER
            by_label[label] = fold(by_label.get(label, 0), value)
        for label, value in by_label.items():
            family.add_metric([label], value)

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily('kale_queue_messages', 'Approximate messages in each queue, by '
                              'state', labels=['queue', 'state']),
            GaugeMetricFamily('kale_queue_up', 'Whether the queue\'s counts could be read',
                              labels=['queue']),
            GaugeMetricFamily('kale_records_tasks', 'Task records by status', labels=['status']),
            GaugeMetricFamily('kale_queue_oldest_task_age_seconds', 'How long the oldest task '
                              'waiting in each queue has waited', labels=['queue']),
            GaugeMetricFamily('kale_queue_workers', 'Running workers serving each queue',
                              labels=['queue']),
            GaugeMetricFamily('kale_queue_backlog_per_worker', 'Visible messages per running '
                              'worker serving the queue (the autoscaling signal)',
                              labels=['queue']),
        )

    def _counts(self, queue: Any) -> Optional[tuple[int, int, int, int]]:
        """(visible, in flight, delayed, dead letters), or None when SQS failed."""
        try:
            counts = self._read(self.broker.sqs_name(queue))
            dead_letter_queue = self.broker.dead_letter_name(queue)
            dead = self._read(dead_letter_queue) if dead_letter_queue else None
        except SQSError as exc:
            logger.warning('metrics: counts of queue %s could not be read: %s', queue.name, exc)
            return None
        if counts is None:
            return (0, 0, 0, dead.total if dead else 0)
        return (counts.visible, counts.in_flight, counts.delayed, dead.total if dead else 0)

    def _read(self, sqs_name: str) -> Any:
        try:
            return self.broker.transport.counts(sqs_name)
        except QueueNotFoundError:       # not created yet: nothing in it
            return None

    @staticmethod
    def _call(source: Callable[[], Mapping[str, Any]], what: str) -> Mapping[str, Any]:
        try:
            return source()
        except Exception:
            logger.exception('metrics: %s could not be read', what)
            return {}


def queue_registry(broker: 'Broker', task_counts: Optional[Callable[[], Mapping[str, int]]] = None,
                   oldest_queued: Optional[Callable[[], Mapping[str, float]]] = None,
                   workers: Optional[Callable[[], Mapping[str, int]]] = None,
                   oldest_ages: Optional[Callable[[list[str]], Mapping[str, float]]] = None
                   ) -> CollectorRegistry:
    """A registry holding a :class:`QueueCollector`, for a web app to serve."""
    registry = CollectorRegistry()
    registry.register(QueueCollector(broker, task_counts, oldest_queued, workers=workers,
                                     oldest_ages=oldest_ages))
    return registry


def render(registry: CollectorRegistry, accept: Optional[str] = None) -> tuple[bytes, str]:
    """The registry's samples as a ``/metrics`` response: (body, content type),
    in the format the scraper's ``Accept`` header asks for."""
    encoder, content_type = choose_encoder(accept or '')
    return encoder(registry), content_type
