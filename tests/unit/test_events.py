"""One vocabulary for outcomes: every Outcome has its name in each layer, and
records, metrics, tracing and the hooks all handle every one of them (a new
outcome that one of them does not know fails here, instead of losing records)."""
from __future__ import annotations

import pytest

from kale import records
from kale.app import default_app
from kale.events import HOLDS_GROUP, OUTCOMES, Outcome, Settle, Settlement
from kale.hooks import HookDispatcher, WorkerHooks
from kale.records.hooks import RecordsHooks
from kale.statuses import TaskStatus
from kale.worker.report import Reporter
from tests.support.received import settled
from tests.support.unavailable import require_module


@pytest.mark.parametrize('outcome', list(Outcome))
def test_every_outcome_has_a_name_in_every_layer(outcome):
    assert outcome.record_status in tuple(TaskStatus)
    assert outcome.metric_label and outcome.settle_operation
    assert callable(getattr(WorkerHooks, outcome.hook_name))


@pytest.mark.parametrize('outcome', list(Outcome))
def test_the_records_write_every_outcome_of_a_run(outcome, records_url):
    hooks = RecordsHooks.for_app(default_app())
    batch, s = settled(outcome)
    hooks.on_task_started(batch.queue, s.received, s.message)
    hooks.after_batch(batch.queue, batch)
    record = records.get(s.task_id)
    assert record is not None and record.status == outcome.record_status


@pytest.mark.parametrize('outcome', list(Outcome))
def test_the_reporter_calls_each_outcomes_hook(outcome):
    called = []

    class Seen(WorkerHooks):
        pass
    setattr(Seen, outcome.hook_name, lambda self, settlement: called.append(settlement))
    batch, s = settled(outcome)
    Reporter(HookDispatcher([Seen()])).batch_settled(batch)
    assert called == [s]


@pytest.mark.parametrize('outcome', list(Outcome))
def test_metrics_count_every_outcome_under_its_label(outcome):
    prometheus = require_module('prometheus_client', 'the metrics hooks (extra metrics)')
    from kale.contrib.metrics import PrometheusHooks
    registry = prometheus.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry)
    batch, s = settled(outcome)
    hooks.after_batch(batch.queue, batch)
    assert registry.get_sample_value('kale_tasks_total', {
        'queue': 'default', 'task': s.task_name, 'outcome': outcome.metric_label}) == 1


@pytest.mark.parametrize('outcome', list(Outcome))
def test_tracing_names_every_outcomes_settle_operation(outcome):
    require_module('opentelemetry.sdk', 'the tracing tests export spans to memory')
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from kale.contrib.tracing import TracingHooks
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = TracingHooks(tracer_provider=provider)
    batch, s = settled(outcome)
    hooks.on_task_started(batch.queue, s.received, s.message)
    hooks.on_task_finished(s)
    hooks.after_batch(batch.queue, batch)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert spans['kale.settle'].attributes['messaging.operation.name'] == outcome.settle_operation
    assert spans['kale.run'].attributes['kale.outcome'] == outcome.value


#: What each way of settling leaves behind: (visible copies on the queue,
#: delayed copies on it, copies on its dead-letter queue). The original is
#: always gone from the queue.
LEFT_BEHIND = {Settle.DELETE: (0, 0, 0), Settle.COPY: (0, 1, 0), Settle.RELEASE: (1, 0, 0),
               Settle.DEAD_LETTER: (0, 0, 1)}


@pytest.mark.parametrize('outcome', list(Outcome))
def test_the_consumer_settles_each_outcome_as_its_row_says(outcome, app):
    """Every outcome through the consumer on the memory transport: what is
    on the queue and its dead-letter queue after settling is what its row's
    ``settle`` says (a new kind of settling fails here until it is taught)."""
    from kale.transport import OutgoingMessage
    from kale.worker.batch import Batch
    from kale.worker.consumer import Consumer
    from tests import tasks
    broker, queue = app.broker, app.queues['default']
    app.publish(tasks.AddTask, None, 1, 2)
    received = broker.receive(queue)
    assert len(received) == 1
    batch = Batch(queue, received, app.clock.monotonic(), broker.sqs_name(queue))
    copy = OutgoingMessage(received[0].body, {}, 30 if outcome.settle is Settle.COPY else 0)
    batch.settlements = [Settlement(received[0], outcome, reason='test',
                                    copy=None if outcome.settle is Settle.RELEASE else copy)]
    Consumer(broker, clock=app.clock).settle(batch)
    assert batch.settlements[0].settled
    visible = broker.transport.receive(batch.sqs_name, 10, 0, 600)
    app.clock.advance(60)
    delayed = broker.transport.receive(batch.sqs_name, 10, 0, 30)
    dead = broker.transport.receive(broker.dead_letter_name(queue), 10, 0, 30)
    assert (len(visible), len(delayed), len(dead)) == LEFT_BEHIND[outcome.settle]
    assert [m.body for m in visible + delayed + dead] == \
        [received[0].body] * sum(LEFT_BEHIND[outcome.settle])


def test_every_outcome_has_a_row_with_words_for_each_layer():
    for outcome, row in OUTCOMES.items():
        assert outcome.row is row and isinstance(row.settle, Settle)
        assert isinstance(row.record_status, TaskStatus) and row.line.startswith('%(where)s')
        if row.holds_group:
            assert row.settle in (Settle.COPY, Settle.RELEASE), outcome
    assert HOLDS_GROUP == (Outcome.RETRY, Outcome.RELEASE)
