"""Tracers that wrap botocore's BaseClient._make_api_call (OpenTelemetry's
botocore instrumentation, AWS X-Ray's SDK) see the hot SQS requests: while one
is on, kale.transport.direct leaves them to botocore, and sends them itself
again once it is off."""
import functools

import botocore.client
import pytest
from aws_xray_sdk.core import xray_recorder
from aws_xray_sdk.ext.botocore import patch as xray_patch
from botocore.client import BaseClient
from botocore.endpoint import Endpoint
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kale.conf import settings
from kale.transport import OutgoingMessage, VisibilityChange, direct
from kale.transport.sqs import SQSTransport

HOT = ['SendMessage', 'SendMessageBatch', 'ReceiveMessage', 'ChangeMessageVisibilityBatch',
       'DeleteMessageBatch']


def _pipeline(transport):
    """The hot operations that go through botocore's pipeline, as they go
    (a direct request never emits before-parameter-build)."""
    seen = []
    for operation in direct.OPERATIONS:
        transport.client.meta.events.register(
            'before-parameter-build.sqs.%s' % operation,
            lambda operation=operation, **kw: seen.append(operation))
    return seen


def _hot_requests(transport, queue):
    """Each hot request once, in the order of HOT."""
    assert transport.send(queue, OutgoingMessage('one', {'tenant': 'acme'})) != ''
    assert len(transport.send_batch(queue, [OutgoingMessage('two'), OutgoingMessage('three')])) == 2
    received = transport.receive(queue, 10, 0, 30)
    assert sorted(m.body for m in received) == ['one', 'three', 'two']
    assert transport.change_visibility_batch(
        queue, [VisibilityChange(m.receipt_handle, 30) for m in received]) == []
    assert transport.delete_batch(queue, [m.receipt_handle for m in received]) == []


def _transport(queue):
    """A transport whose queue exists (its URL known), that can send directly."""
    transport = SQSTransport(config=settings.config)
    assert transport.direct is not None
    transport.queue = queue
    transport.ensure_queue(queue, 30, None, 0)
    return transport


@pytest.fixture
def transport(sqs):
    return _transport(sqs.prefix + 'traced')


@pytest.mark.parametrize('instrumented_first', [False, True],
                         ids=['instrumented-later', 'instrumented-first'])
def test_opentelemetrys_botocore_instrumentation_gets_its_sqs_spans(sqs, instrumented_first):
    """As ``opentelemetry-instrument`` does it, before the app builds its
    transport, or later, in the app's own code."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = BotocoreInstrumentor()
    transport = None if instrumented_first else _transport(sqs.prefix + 'traced')
    instrumentor.instrument(tracer_provider=provider)
    try:
        transport = transport or _transport(sqs.prefix + 'traced')
        pipeline = _pipeline(transport)
        exporter.clear()                            # the queue's creation
        _hot_requests(transport, transport.queue)
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ['SQS.%s' % operation for operation in HOT]
    for span, operation in zip(spans, HOT, strict=True):
        assert span.attributes['rpc.system'] == 'aws-api'
        assert span.attributes['rpc.service'] == 'SQS'
        assert span.attributes['rpc.method'] == operation
        assert span.attributes['messaging.system'] == 'aws.sqs'
        assert span.attributes['messaging.url'] == transport.url(transport.queue)
    assert pipeline == HOT

    del pipeline[:]
    _hot_requests(transport, transport.queue)       # instrumentation off: direct again
    assert pipeline == [] and len(exporter.get_finished_spans()) == len(HOT)


def test_xrays_botocore_patch_gets_its_sqs_subsegments(transport, monkeypatch):
    # X-Ray's SDK cannot unpatch: put botocore's methods back after the test.
    monkeypatch.setattr(BaseClient, '_make_api_call', BaseClient.__dict__['_make_api_call'])
    monkeypatch.setattr(Endpoint, 'prepare_request', Endpoint.__dict__['prepare_request'])
    pipeline = _pipeline(transport)
    xray_patch()
    try:
        segment = xray_recorder.begin_segment('kale-test', sampling=1)
        _hot_requests(transport, transport.queue)
        calls = [(sub.name, sub.aws.get('operation')) for sub in segment.subsegments]
    finally:
        xray_recorder.clear_trace_entities()        # nothing sent to a daemon
        del botocore.client._xray_enabled
    assert calls == [('sqs', operation) for operation in HOT]
    assert pipeline == HOT


def test_a_wrapper_made_with_functools_wraps_is_a_tracers_too():
    """It copies the name, module and __wrapped__ of botocore's method, as
    botocore's own decorator on it does; where its code lives tells them apart."""
    own = BaseClient.__dict__['_make_api_call']

    @functools.wraps(own)
    def traced(*args, **kwargs):
        return own(*args, **kwargs)

    assert direct.botocores_own(own)
    assert not direct.botocores_own(traced)
    assert not direct.botocores_own(None)
