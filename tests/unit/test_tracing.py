"""OpenTelemetry traces (kale.contrib.tracing), exported to memory by the SDK,
in-process over the in-memory transport."""
import secrets

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kale import codec
from kale import publisher as kale_publisher
from kale import worker as kale_worker
from kale.app import App
from kale.contrib.tracing import TracingHooks
from kale.exceptions import MessageTooLargeError
from kale.message import Message
from kale.transport.memory import MemoryTransport
from tests import tasks
from tests.support.work import work

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def hooks(exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracingHooks(tracer_provider=provider)


@pytest.fixture
def traced(memory_broker, hooks):
    """Publish and work with the tracing hooks; returns the publisher."""
    publisher = kale_publisher.Publisher(memory_broker, hooks=[hooks])
    previous = kale_publisher.set_publisher(publisher)
    tasks.TraceTask.spans = []
    yield publisher
    kale_publisher.set_publisher(previous)


@pytest.fixture
def traced_app(app, hooks, pool):
    """The app, publishing with the tracing hooks, its workers on this test's pool."""
    tasks.TraceTask.spans = []
    return app.replace(WORKER_POOL=pool, PUBLISH_HOOKS=[hooks])


def on_system_clock(app):
    """``app`` on a new in-memory transport read on the machine's clock: a
    retry's copy is due after its delay, which only a moving clock brings,
    and a FakeClock moves only when the test moves it, not while
    ``worker.run()`` blocks."""
    return App(app.config, transport=MemoryTransport())


def work_traced(app, hooks):
    """A burst worker of ``app`` on 'default' with the tracing hooks; it must exit 0."""
    code = kale_worker.Worker(queue_names=['default'], burst=True, app=app, hooks=[hooks]).run()
    assert code == 0, 'the worker exited %d, not 0' % code


def spans(exporter, name):
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_the_run_span_is_a_child_of_the_publish_span(traced, memory_broker, hooks, exporter):
    tasks.TraceTask.publish(None)
    work(memory_broker, [hooks], queues=['default'])
    [publish], [run] = spans(exporter, 'kale.publish'), spans(exporter, 'kale.run')
    assert run.parent.span_id == publish.context.span_id
    assert run.context.trace_id == publish.context.trace_id
    assert (publish.kind, run.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)


def test_the_settle_span_is_a_child_of_the_run_and_names_what_settling_did(
        traced, memory_broker, hooks, exporter):
    tasks.TraceTask.publish(None)
    work(memory_broker, [hooks], queues=['default'])
    [run], [settle] = spans(exporter, 'kale.run'), spans(exporter, 'kale.settle')
    assert settle.parent.span_id == run.context.span_id
    assert settle.kind == SpanKind.CLIENT
    assert settle.attributes['messaging.operation.type'] == 'settle'
    assert settle.attributes['messaging.operation.name'] == 'delete'
    assert run.end_time <= settle.start_time <= settle.end_time


def test_spans_carry_the_messaging_attributes(traced, memory_broker, hooks, exporter):
    task_id = tasks.TraceTask.publish(None)
    work(memory_broker, [hooks], queues=['default'])
    [publish], [run] = spans(exporter, 'kale.publish'), spans(exporter, 'kale.run')
    queue = memory_broker.sqs_name(memory_broker.queues['default'])
    for span in (publish, run):
        assert span.attributes['messaging.system'] == 'aws_sqs'
        assert span.attributes['messaging.destination.name'] == queue
        assert span.attributes['kale.task.id'] == task_id
    assert publish.attributes['messaging.operation.type'] == 'send'
    assert run.attributes['messaging.operation.type'] == 'process'
    assert publish.attributes['messaging.message.id'] == run.attributes['messaging.message.id']


def test_the_run_span_is_current_while_the_task_runs(traced, memory_broker, hooks, exporter):
    tasks.TraceTask.publish(None)
    work(memory_broker, [hooks], queues=['default'])
    [run] = spans(exporter, 'kale.run')
    assert tasks.TraceTask.spans[0].span_id == run.context.span_id


def test_each_run_side_by_side_has_its_own_current_span(traced, memory_broker, hooks,
                                                        exporter):
    """On a pool several tasks run at once: each sees its own kale.run span."""
    tasks.TraceTask.publish_batch(None, [((), {}) for _ in range(6)])
    work(memory_broker, [hooks], queues=['default'])
    runs = spans(exporter, 'kale.run')
    assert len(runs) == 6
    assert sorted(c.span_id for c in tasks.TraceTask.spans) == sorted(
        run.context.span_id for run in runs)
    assert len({settle.parent.span_id for settle in spans(exporter, 'kale.settle')}) == 6


def test_a_retry_joins_the_trace_of_its_publish(traced_app, hooks, exporter):
    retrying = on_system_clock(traced_app.replace(RETRY_DELAY_MULTIPLE_SEC=0))
    retrying.publish(tasks.TraceTask, None, fail=True)
    work_traced(retrying, hooks)
    [publish] = spans(exporter, 'kale.publish')
    runs = spans(exporter, 'kale.run')
    assert len(runs) == 2
    assert {run.parent.span_id for run in runs} == {publish.context.span_id}
    assert [run.attributes['kale.attempt'] for run in runs] == [1, 2]


def test_a_failed_run_is_an_error_span_with_the_exception(traced_app, hooks, exporter):
    retrying = on_system_clock(traced_app.replace(RETRY_DELAY_MULTIPLE_SEC=0))
    retrying.publish(tasks.TraceTask, None, fail=True)
    work_traced(retrying, hooks)
    failed = spans(exporter, 'kale.run')[0]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.events[0].name == 'exception'
    assert spans(exporter, 'kale.settle')[0].attributes['messaging.operation.name'] == 'retry'


def test_a_batch_publish_is_one_span(traced, exporter):
    tasks.TraceTask.publish_batch(None, [((), {}) for _ in range(3)])
    [publish] = spans(exporter, 'kale.publish')
    assert publish.attributes['messaging.batch.message_count'] == 3


def test_a_publish_that_fails_ends_its_span_as_an_error(traced_app, exporter):
    small = traced_app.replace(SQS_TASK_SIZE_LIMIT=1024)
    with pytest.raises(MessageTooLargeError):                       # refused while encoding
        small.publish(tasks.TraceTask, None, fail=secrets.token_hex(2000))
    [publish] = spans(exporter, 'kale.publish')
    assert publish.status.status_code == StatusCode.ERROR


def test_the_trace_context_travels_in_the_signed_envelope(traced, memory_broker):
    tasks.TraceTask.publish(None)
    queue = memory_broker.sqs_name(memory_broker.queues['default'])
    [received] = memory_broker.transport.receive(queue, 10, 0, 30, ('All',))
    message = codec.decode(received.body, queue)
    assert message.context['traceparent'].startswith('00-')
    assert received.attributes['traceparent'] == message.context['traceparent']  # for other tools


def test_a_message_context_survives_encoding_and_its_copies():
    message = Message('id', 'tests.tasks.AddTask', context={'traceparent': '00-ab-cd-01',
                                                           'tracestate': 'a=1,b=2'})
    decoded = codec.decode(codec.encode(message, 'q'), 'q')
    assert decoded.context == message.context
    assert decoded.next_attempt().context == message.context


def test_a_message_without_context_has_no_context_header():
    body = codec.encode(Message('id', 'tests.tasks.AddTask'), 'q')
    assert ';x=' not in body.split(':')[1] and codec.decode(body, 'q').context == {}


def test_tracing_turns_the_hooks_on_for_workers_and_publishers(app, pool):
    tracing = app.replace(TRACING=True, WORKER_POOL=pool)
    worker = kale_worker.Worker(queue_names=['default'], burst=True, app=tracing)
    assert worker.pool == pool
    assert any(isinstance(h, TracingHooks) for h in worker.hooks.hooks)
    assert any(isinstance(h, TracingHooks) for h in tracing.publisher.hooks.hooks)
