"""One vocabulary for outcomes: every Outcome has its name in each layer, and
records, metrics, tracing and the hooks all handle every one of them (a new
outcome that one of them does not know fails here, instead of losing records)."""
from __future__ import annotations

import pytest

from kale import records
from kale.conf import settings
from kale.events import Outcome
from kale.hooks import HookDispatcher, WorkerHooks
from kale.records.hooks import RecordsHooks
from kale.records.schema import STATUSES
from kale.worker.report import Reporter
from tests.support.received import settled


@pytest.mark.parametrize('outcome', list(Outcome))
def test_every_outcome_has_a_name_in_every_layer(outcome):
    assert outcome.record_status in STATUSES
    assert outcome.metric_label and outcome.settle_operation
    assert callable(getattr(WorkerHooks, outcome.hook_name))


@pytest.mark.parametrize('outcome', list(Outcome))
def test_the_records_write_every_outcome_of_a_run(outcome, records_url):
    hooks = RecordsHooks(settings.config)
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
    prometheus = pytest.importorskip('prometheus_client')
    from kale.contrib.metrics import PrometheusHooks
    registry = prometheus.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry)
    batch, s = settled(outcome)
    hooks.after_batch(batch.queue, batch)
    assert registry.get_sample_value('kale_tasks_total', {
        'queue': 'default', 'task': s.task_name, 'outcome': outcome.metric_label}) == 1


@pytest.mark.parametrize('outcome', list(Outcome))
def test_tracing_names_every_outcomes_settle_operation(outcome):
    pytest.importorskip('opentelemetry.sdk')
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
