"""Prometheus metrics for workers and publishers, as hooks (``METRICS_PORT``),
listed by the docs site's metrics reference. See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from kale.events import Outcome
from kale.exceptions import ImproperlyConfigured
from kale.hooks import PublishHooks, WorkerHooks

try:
    import prometheus_client
    from prometheus_client import Counter, Histogram
except ImportError as exc:      # pragma: no cover - the extra is missing
    raise ImproperlyConfigured(
        'METRICS_PORT is set, but prometheus_client is not installed: '
        "pip install 'kale-sqs[metrics]' (%s)" % exc) from None

from kale.contrib import exposition

if TYPE_CHECKING:
    from kale.app import App
    from kale.message import Message
    from kale.publisher import Publication
    from kale.queue_config import TaskQueue
    from kale.transport import ReceivedMessage
    from kale.worker.batch import Batch

#: Seconds, of runs and of latencies: from a few milliseconds (a long poll's
#: answer) to the longest time limit worth a bucket (a queue far behind).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
           3600.0, float('inf'))


class KaleMetrics:
    """Kale's metrics on one registry (made once per registry, see :func:`metrics_for`)."""

    def __init__(self, registry: Any):
        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return Counter(name, text, labels, registry=registry)

        def histogram(name: str, text: str) -> Any:
            return Histogram(name, text, ('queue', 'task'), registry=registry, buckets=BUCKETS)

        self.tasks = counter('kale_tasks_total', 'Task messages settled, by outcome',
                             ('queue', 'task', 'outcome'))
        self.duration = histogram('kale_task_duration_seconds', 'How long task runs took')
        self.latency = histogram('kale_task_latency_seconds', 'From publish to the start of '
                                 'the first run')
        self.received = counter('kale_messages_received_total', 'Messages received',
                                ('queue',))
        self.batches = counter('kale_batches_total', 'Batches run', ('queue',))
        self.requests = counter('kale_sqs_requests_total', 'SQS API calls by operation and '
                                'result (ok, error)', ('operation', 'result'))
        self.busy = counter('kale_worker_busy_seconds_total', 'Time spent running tasks')
        self.published = counter('kale_published_total', 'Task messages published',
                                 ('queue', 'task'))


_lock = threading.Lock()
_by_registry: dict[Any, KaleMetrics] = {}


def metrics_for(registry: Any) -> KaleMetrics:
    """Kale's metrics on ``registry``, made on first use (a registry refuses a
    name twice, and several hooks may share one)."""
    with _lock:
        if registry not in _by_registry:
            _by_registry[registry] = KaleMetrics(registry)
        return _by_registry[registry]


#: Distinct (queue, task) series one process makes, at most: a message's task
#: path comes from its publisher, and a metric's labels must stay bounded.
MAX_TASK_SERIES = 500
#: What a task path is (module.Class); anything else is counted as '?'.
TASK_PATH = re.compile(r'[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+')


def task_label(task: str, series_made: int) -> str:
    """The ``task`` label for a task path: the path itself while there are
    fewer than MAX_TASK_SERIES series, 'other' past that, '?' for a value
    that is not a task path."""
    if len(task) > 200 or not TASK_PATH.fullmatch(task):
        return '?'
    return task if series_made < MAX_TASK_SERIES else 'other'


class TaskSeries:
    """The series of one (queue, task) pair, made once."""

    __slots__ = ('duration', 'latency', 'outcomes')

    def __init__(self, metrics: KaleMetrics, queue: str, task: str):
        self.outcomes = {outcome: metrics.tasks.labels(queue, task, outcome.metric_label)
                         for outcome in Outcome}
        self.duration = metrics.duration.labels(queue, task)
        self.latency = metrics.latency.labels(queue, task)


class RequestCounter:
    """Counts a transport's requests by operation and result: a boto3
    client's through its event hooks (no boto3 import here), the memory
    transport's through ``on_request``."""

    def __init__(self, counter: Any):
        self.counter = counter
        self._children: dict[tuple[str, str], Any] = {}
        self._detach: Optional[Callable[[], None]] = None
        self._id = 'kale-metrics-%d' % id(self)

    def count(self, operation: str, result: str) -> None:
        child = self._children.get((operation, result))
        if child is None:
            child = self._children[(operation, result)] = self.counter.labels(operation, result)
        child.inc()

    def attach(self, transport: Any) -> None:
        events = getattr(getattr(getattr(transport, 'client', None), 'meta', None), 'events', None)
        if events is not None:
            handlers = [('after-call.sqs', self._after_call, self._id + '-ok'),
                        ('after-call-error.sqs', self._after_error, self._id + '-error')]
            for event, handler, unique_id in handlers:
                events.register(event, handler, unique_id=unique_id)

            def detach() -> None:
                for event, _, unique_id in handlers:
                    events.unregister(event, unique_id=unique_id)
            self._detach = detach
        elif hasattr(transport, 'on_request'):
            previous = transport.on_request

            def on_request(operation: str) -> None:
                self.count(operation, 'ok')
                if previous is not None:
                    previous(operation)
            transport.on_request = on_request
            self._detach = lambda: setattr(transport, 'on_request', previous)

    def detach(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None

    def _after_call(self, http_response: Any = None, model: Any = None, event_name: str = '',
                    **kwargs: Any) -> None:
        operation = model.name if model is not None else event_name.rsplit('.', 1)[-1]
        ok = http_response is not None and http_response.status_code < 300
        self.count(operation, 'ok' if ok else 'error')

    def _after_error(self, event_name: str = '', **kwargs: Any) -> None:
        self.count(event_name.rsplit('.', 1)[-1], 'error')


class PrometheusHooks(PublishHooks, WorkerHooks):
    """Records Kale's metrics into ``registry`` (prometheus_client's default
    one unless given) and serves them from a worker, or a supervisor, on
    ``port`` (``METRICS_PORT`` unless given; 0: not served)."""

    def __init__(self, registry: Any = None, port: int = 0, host: str = '127.0.0.1'):
        self.registry = registry if registry is not None else prometheus_client.REGISTRY
        self.port = int(port)
        self.host = str(host)
        self._metrics: Optional[KaleMetrics] = None
        self._tasks: dict[tuple[str, str], TaskSeries] = {}
        self._queues: dict[str, tuple[Any, Any]] = {}
        self._requests: Optional[RequestCounter] = None
        self._server: Optional[exposition.Server] = None
        self._endpoint: Optional[exposition.SupervisorEndpoint] = None

    @classmethod
    def for_app(cls, app: 'App') -> 'PrometheusHooks':
        """The hooks of ``app`` (METRICS_PORT, METRICS_HOST)."""
        return cls(port=int(app.config.METRICS_PORT), host=str(app.config.METRICS_HOST))

    @property
    def metrics(self) -> KaleMetrics:
        if self._metrics is None:
            self._metrics = metrics_for(self.registry)
        return self._metrics

    def series(self, queue: str, task: str) -> TaskSeries:
        found = self._tasks.get((queue, task))
        if found is None:
            label = task_label(task, len(self._tasks))
            found = self._tasks.get((queue, label))
            if found is None:
                found = self._tasks[(queue, label)] = TaskSeries(self.metrics, queue, label)
        return found

    # --- a worker ---------------------------------------------------------------

    def on_worker_startup(self, worker: Any) -> None:
        self._requests = RequestCounter(self.metrics.requests)
        self._requests.attach(worker.broker.transport)
        if self.port and not exposition.supervised():
            self._server = exposition.Server(self.registry, self.port, self.host, worker.name)

    def on_worker_shutdown(self, worker: Any) -> None:
        if self._requests is not None:
            self._requests.detach()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def on_task_started(self, queue: 'TaskQueue', received: 'ReceivedMessage',
                        message: 'Message') -> None:
        if message.retry_num == 0 and message.sent_at:
            latency = time.time() - message.sent_at
            self.series(queue.name, message.task_name).latency.observe(max(latency, 0.0))

    def after_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        name = queue.name
        counters = self._queues.get(name)
        if counters is None:
            counters = self._queues[name] = (self.metrics.received.labels(name),
                                             self.metrics.batches.labels(name))
        counters[0].inc(len(batch.messages))
        counters[1].inc()
        busy = 0.0
        for s in batch.settlements:
            outcome = s.outcome
            if outcome is Outcome.DEAD_LETTER and not s.settled:
                continue                # its copy was not sent: it will run again
            series = self.series(name, s.task_name)
            series.outcomes[outcome].inc()
            if s.task is not None:
                series.duration.observe(s.duration_sec)
                busy += s.duration_sec
        if busy:
            self.metrics.busy.inc(busy)

    # --- a supervisor -------------------------------------------------------------

    def on_supervisor_startup(self, supervisor: Any) -> None:
        if self.port:
            self._endpoint = exposition.SupervisorEndpoint(self.port, self.host)
            self._endpoint.start(supervisor.env)

    def on_worker_exited(self, supervisor: Any, pid: int, exit_code: int) -> None:
        if self._endpoint is not None:
            self._endpoint.worker_exited(pid)

    def on_supervisor_shutdown(self, supervisor: Any) -> None:
        if self._endpoint is not None:
            self._endpoint.stop()
            self._endpoint = None

    # --- a publisher --------------------------------------------------------------

    def after_publish(self, publication: 'Publication') -> None:
        if publication.error is None:
            self.metrics.published.labels(publication.queue.name, publication.task_class
                                          .task_path()).inc(len(publication.messages))
