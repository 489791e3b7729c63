"""OpenTelemetry traces from publish to settle, as hooks (``TRACING = True``):
spans ``kale.publish``, ``kale.run`` and ``kale.settle``, the context carried
in the signed envelope. See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from kale.exceptions import ImproperlyConfigured
from kale.hooks import PublishHooks, WorkerHooks
from kale.version import __version__

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:      # pragma: no cover - the extra is missing
    raise ImproperlyConfigured(
        "TRACING is on, but opentelemetry is not installed: pip install 'kale-sqs[otel]' (%s)"
        % exc) from None

if TYPE_CHECKING:
    from kale.app import App
    from kale.events import Settlement
    from kale.message import Message
    from kale.publisher import Publication
    from kale.queue_config import TaskQueue
    from kale.transport import ReceivedMessage
    from kale.worker.batch import Batch

SYSTEM = 'aws_sqs'


def _nanoseconds(epoch_sec: float) -> int:
    return int(epoch_sec * 1e9)


class TracingHooks(PublishHooks, WorkerHooks):
    """Spans ``kale.publish``, ``kale.run`` and ``kale.settle``."""

    def __init__(self, tracer_provider: Any = None):
        self.tracer = trace.get_tracer('kale', __version__, tracer_provider=tracer_provider)
        self._publishing: dict[int, Any] = {}
        #: The runs going on, by SQS message id: their span and context token
        #: (a worker with a pool runs many at once).
        self._running: dict[str, tuple[Any, Any]] = {}
        #: Runs that ended, by SQS message id, waiting for their settle span.
        self._ran: dict[str, Any] = {}
        self._broker: Any = None

    @classmethod
    def for_app(cls, app: 'App') -> 'TracingHooks':
        """The hooks of ``app`` (with TRACING on)."""
        return cls()

    # --- publishing -----------------------------------------------------------------

    def before_publish(self, publication: 'Publication') -> None:
        count = len(publication.messages)
        attributes: dict[str, Any] = {
            'messaging.system': SYSTEM, 'messaging.destination.name': publication.sqs_name,
            'messaging.operation.type': 'send',
            'messaging.operation.name': 'send' if count == 1 else 'send_batch',
            'kale.task.name': publication.task_class.task_path()}
        if count == 1:
            attributes['kale.task.id'] = publication.messages[0].task_id
        else:
            attributes['messaging.batch.message_count'] = count
        span = self.tracer.start_span('kale.publish', kind=SpanKind.PRODUCER,
                                      attributes=attributes)
        self._publishing[id(publication)] = span
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        for context, extra in zip(publication.context, publication.attributes, strict=True):
            context.update(carrier)
            if 'traceparent' in carrier:
                extra['traceparent'] = carrier['traceparent']

    def after_publish(self, publication: 'Publication') -> None:
        span = self._publishing.pop(id(publication), None)
        if span is None:
            return
        if len(publication.message_ids) == 1:
            span.set_attribute('messaging.message.id', publication.message_ids[0])
        if publication.error is not None:
            span.record_exception(publication.error)
            span.set_status(Status(StatusCode.ERROR, type(publication.error).__name__))
        span.end()

    # --- working --------------------------------------------------------------------

    def on_worker_startup(self, worker: Any) -> None:
        self._broker = worker.broker

    def _destination(self, queue: 'TaskQueue') -> str:
        return self._broker.sqs_name(queue) if self._broker is not None else queue.name

    def on_task_started(self, queue: 'TaskQueue', received: 'ReceivedMessage',
                        message: 'Message') -> None:
        self._end_run(received.message_id)      # one left open by a run that never finished
        parent = propagate.extract(message.context) if message.context else None
        span = self.tracer.start_span('kale.run', context=parent, kind=SpanKind.CONSUMER,
                                      attributes={
                                          'messaging.system': SYSTEM,
                                          'messaging.destination.name': self._destination(queue),
                                          'messaging.operation.type': 'process',
                                          'messaging.operation.name': 'run',
                                          'messaging.message.id': received.message_id,
                                          'kale.task.name': message.task_name,
                                          'kale.task.id': message.task_id,
                                          'kale.attempt': message.attempt})
        token = otel_context.attach(trace.set_span_in_context(span))
        self._running[received.message_id] = (span, token)

    def on_task_finished(self, settlement: 'Settlement') -> None:
        self._end_run(settlement.received.message_id, settlement)

    def _end_run(self, message_id: str, settlement: Optional['Settlement'] = None) -> None:
        running = self._running.pop(message_id, None)
        if running is None:
            return
        span, token = running
        otel_context.detach(token)
        if settlement is not None:
            outcome = settlement.outcome
            span.set_attribute('kale.outcome', outcome.value)
            if outcome.run_failed:
                if settlement.exception is not None:
                    span.record_exception(settlement.exception)
                span.set_status(Status(StatusCode.ERROR, settlement.reason[:200]))
            self._ran[message_id] = trace.set_span_in_context(span)
        span.end()

    def after_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """A ``kale.settle`` span for each task of the batch that ran."""
        if not self._ran:
            return
        ended = batch.settle_ended or time.time()
        started = batch.settle_started or ended
        for s in batch.settlements:
            parent = self._ran.pop(s.received.message_id, None)
            if parent is None:
                continue
            outcome = s.outcome
            span = self.tracer.start_span(
                'kale.settle', context=parent, kind=SpanKind.CLIENT,
                start_time=_nanoseconds(started), attributes={
                    'messaging.system': SYSTEM,
                    'messaging.destination.name': self._destination(queue),
                    'messaging.operation.type': 'settle',
                    'messaging.operation.name': outcome.settle_operation,
                    'messaging.message.id': s.received.message_id,
                    'kale.outcome': outcome.value})
            if not s.settled:
                span.set_status(Status(StatusCode.ERROR, 'not settled: the message will '
                                                         'reappear after its visibility timeout'))
            span.end(end_time=_nanoseconds(max(ended, started)))
