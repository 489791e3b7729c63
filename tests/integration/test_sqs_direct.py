"""A worker's hot requests built without botocore's pipeline (kale.transport.direct):
the same answers, the same hooks, and botocore's way whenever they fail."""
import logging
import os
import re
import socket

import botocore
import pytest

from kale.conf import settings
from kale.exceptions import EndpointUnreachableError, QueueNotFoundError
from kale.transport import OutgoingMessage, VisibilityChange, direct
from kale.transport import sqs as sqs_transport
from kale.transport.sqs import SQSTransport
from kale.version import BOTOCORE_TESTED


def _events(transport, operations=direct.OPERATIONS):
    """(before-send, before-parameter-build, after-call) operation names seen."""
    seen = {'send': [], 'build': [], 'after': []}
    events = transport.client.meta.events
    for operation in operations:
        events.register('before-send.sqs.%s' % operation,
                        lambda operation=operation, **kw: seen['send'].append(operation))
        events.register('before-parameter-build.sqs.%s' % operation,
                        lambda operation=operation, **kw: seen['build'].append(operation))
        events.register('after-call.sqs.%s' % operation,
                        lambda operation=operation, parsed=None, **kw: seen['after'].append(
                            (operation, parsed.get('ResponseMetadata', {}).get('HTTPStatusCode'))))
    return seen


def test_receive_delete_and_visibility_go_direct_and_answer_as_botocore_does(sqs):
    transport = SQSTransport(config=settings.config)
    assert transport.direct is not None
    queue = sqs.prefix + 'direct'
    transport.ensure_queue(queue, 30, None, 0)
    transport.send_batch(queue, [OutgoingMessage('body %d' % i, {'tenant': 'acme', 'n': 7})
                                 for i in range(3)])
    sqs.client.send_message(QueueUrl=transport.url(queue), MessageBody='body 3', MessageAttributes={
        'blob': {'DataType': 'Binary', 'BinaryValue': b'\x00\xffkale'}})
    seen = _events(transport)
    assert transport.send(queue, OutgoingMessage('body 4', {'tenant': 'acme'})) != ''

    received = sorted(transport.receive(queue, 10, 0, 30), key=lambda m: m.body)
    assert [m.body for m in received] == ['body %d' % i for i in range(5)]
    assert received[0].attributes == {'tenant': 'acme', 'n': '7'}
    assert [m.receive_count for m in received] == [1] * 5
    assert transport.change_visibility_batch(
        queue, [VisibilityChange(m.receipt_handle, 0) for m in received[:2]]) == []
    assert transport.delete_batch(queue, [m.receipt_handle for m in received[2:]]) == []
    assert sorted(m.body for m in transport.receive(queue, 10, 0, 30)) == ['body 0', 'body 1']
    ids = transport.send_batch(queue, [OutgoingMessage('more %d' % i) for i in range(3)])
    assert len(ids) == 3 and len(set(ids)) == 3

    sent = ['SendMessage', 'ReceiveMessage', 'ChangeMessageVisibilityBatch',
            'DeleteMessageBatch', 'ReceiveMessage', 'SendMessageBatch']
    assert seen['send'] == sent                 # every request is seen where counters look
    assert seen['after'] == [(operation, 200) for operation in sent]    # and by metrics
    assert seen['build'] == []                  # none went through botocore's pipeline


def test_a_direct_answer_is_what_botocore_gives(sqs):
    transport = SQSTransport(config=settings.config)
    queue = sqs.prefix + 'same'
    transport.ensure_queue(queue, 30, None, 0)
    url = transport.url(queue)
    sqs.client.send_message(QueueUrl=url, MessageBody='x', MessageAttributes={
        'blob': {'DataType': 'Binary', 'BinaryValue': b'\x00\xffkale'},
        'text': {'DataType': 'String', 'StringValue': 'acme'}})
    asked = dict(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                 MessageAttributeNames=['All'], MessageSystemAttributeNames=['All'])
    got = transport.direct.call('ReceiveMessage', asked)['Messages'][0]
    expected = sqs.client.receive_message(**asked)['Messages'][0]
    for answer in (got, expected):          # the receipt and receive count change per receive
        answer.pop('ReceiptHandle')
        answer['Attributes'] = {k: v for k, v in answer['Attributes'].items()
                                if not k.startswith('Approximate')}
    assert got == expected
    assert got['MessageAttributes']['blob']['BinaryValue'] == b'\x00\xffkale'


def test_a_client_given_to_the_transport_makes_every_request_itself(sqs):
    transport = SQSTransport(sqs.client, config=settings.config)
    assert transport.direct is None
    queue = sqs.prefix + 'given'
    transport.ensure_queue(queue, 30, None, 0)
    seen = _events(transport, ['ReceiveMessage'])
    assert transport.receive(queue, 10, 0, 30) == []
    assert seen['build'] == ['ReceiveMessage']


def test_the_setting_off_sends_every_request_through_botocore(sqs):
    with settings.override(SQS_DIRECT_REQUESTS=False):
        transport = SQSTransport(config=settings.config)
    assert transport.direct is None
    queue = sqs.prefix + 'off'
    transport.ensure_queue(queue, 30, None, 0)
    seen = _events(transport, ['ReceiveMessage'])
    assert transport.receive(queue, 10, 0, 30) == []
    assert seen['build'] == ['ReceiveMessage'] and seen['send'] == ['ReceiveMessage']


def test_an_error_answer_is_botocores_to_raise(sqs):
    """A queue deleted under the worker: the direct request's 400 goes back
    through botocore, which raises what it always raised."""
    transport = SQSTransport(config=settings.config)
    queue = sqs.prefix + 'gone'
    transport.ensure_queue(queue, 30, None, 0)
    url = transport.url(queue)
    sqs.client.delete_queue(QueueUrl=url)
    seen = _events(transport, ['ReceiveMessage'])
    with pytest.raises(QueueNotFoundError, match='gone'):
        transport.receive(queue, 10, 0, 30)
    assert seen['send'] == ['ReceiveMessage', 'ReceiveMessage']     # direct, then botocore
    assert seen['build'] == ['ReceiveMessage']


def test_a_handler_that_answers_before_sending_gets_botocores_way(sqs):
    """An in-process mock answers at before-send: the request is not sent
    directly, and botocore's pipeline uses the mock's answer."""
    from botocore.awsrequest import AWSResponse

    transport = SQSTransport(config=settings.config)
    queue = sqs.prefix + 'mocked'
    transport.ensure_queue(queue, 30, None, 0)
    transport.url(queue)

    class Raw:
        def stream(self, **kwargs):
            yield b'{"Messages": []}'

    answered = []

    def answer(request, **kwargs):
        answered.append(request.url)
        return AWSResponse(request.url, 200, {}, Raw())

    transport.client.meta.events.register('before-send.sqs.ReceiveMessage', answer)
    seen = _events(transport, ['ReceiveMessage'])
    assert transport.receive(queue, 10, 0, 30) == []
    assert len(answered) == 2 and seen['build'] == ['ReceiveMessage']


def test_an_endpoint_that_cannot_be_reached_is_the_same_one_line_error(sqs):
    with socket.socket() as listener:               # a port nothing listens on
        listener.bind(('127.0.0.1', 0))
        port = listener.getsockname()[1]
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:%d' % port,
                           SQS_CONNECT_TIMEOUT_SEC=1):
        transport = SQSTransport(config=settings.config)
        transport._urls['q'] = 'http://127.0.0.1:%d/000000000000/q' % port
        assert transport.direct is not None
        with pytest.raises(EndpointUnreachableError, match='unreachable'):
            transport.receive('q', 10, 0, 30)
        with pytest.raises(EndpointUnreachableError, match='unreachable'):
            transport.delete_batch('q', ['handle'])


def test_a_client_whose_requests_cannot_be_built_here_has_none():
    class Odd:
        meta = None
    assert direct.DirectRequests.of(Odd()) is None


def _works_through_botocore(transport, queue):
    """Every hot request of ``transport`` answers, and none went directly."""
    transport.ensure_queue(queue, 30, None, 0)
    seen = _events(transport)
    assert transport.send(queue, OutgoingMessage('one')) != ''
    assert len(transport.send_batch(queue, [OutgoingMessage('two'), OutgoingMessage('three')])) == 2
    received = transport.receive(queue, 10, 0, 30)
    assert sorted(m.body for m in received) == ['one', 'three', 'two']
    assert transport.change_visibility_batch(
        queue, [VisibilityChange(m.receipt_handle, 30) for m in received]) == []
    assert transport.delete_batch(queue, [m.receipt_handle for m in received]) == []
    sent = ['SendMessage', 'SendMessageBatch', 'ReceiveMessage', 'ChangeMessageVisibilityBatch',
            'DeleteMessageBatch']
    assert seen['build'] == sent and seen['send'] == sent     # each once, botocore's way


def _direct_warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == direct.__name__ and r.levelno >= logging.WARNING]


@pytest.mark.parametrize('version', ['1.34.162', '1.45.0', '2.0.0', 'unknown'])
def test_a_botocore_outside_the_tested_range_gets_every_request_with_one_warning(
        sqs, monkeypatch, caplog, version):
    monkeypatch.setattr(botocore, '__version__', version)
    caplog.set_level(logging.INFO, logger=direct.__name__)
    transport = SQSTransport(config=settings.config)
    assert transport.direct is None
    _works_through_botocore(transport, sqs.prefix + 'range')
    warnings = _direct_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert 'botocore %s ' % version in warnings[0] and direct.TESTED_RANGE in warnings[0]


def test_the_range_tested_is_the_range_required():
    """setup.py requires the versions the code checks, the docs name them,
    and the botocore the tests run on is one of them."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    setup = open(os.path.join(root, 'setup.py')).read()
    assert re.search(r"'botocore>=%s,<%s' % about\['BOTOCORE_TESTED'\]", setup)
    performance = open(os.path.join(root, 'docs', 'explanation', 'performance.md')).read()
    assert 'botocore versions\nthey are tested with: %s up to, not including, %s' % BOTOCORE_TESTED \
        in performance
    assert direct.tested_botocore(botocore.__version__)
    assert [direct.tested_botocore(v) for v in ('1.34.162', '1.35', '1.35.0', '1.44.99', '1.45.0',
                                                '1.45.0rc1', '1.100.0', '2.0', '')] == [
        False, True, True, True, False, False, False, False, False]


class _Without:
    """``target`` without its attribute ``name``, as a botocore that keeps
    that part elsewhere would be: botocore's own code, which holds ``target``
    itself, still finds it."""

    def __init__(self, target, name):
        self._target, self._name = target, name

    def __getattr__(self, attr):
        if attr == self._name:
            raise AttributeError('%r object has no attribute %r' % (type(self._target).__name__, attr))
        return getattr(self._target, attr)


@pytest.mark.parametrize('part,name', [('_endpoint', 'http_session'),
                                       ('_request_signer', '_credentials')])
def test_a_client_without_a_part_the_direct_requests_need_gets_every_request_with_one_warning(
        sqs, monkeypatch, caplog, part, name):
    def make_client(for_commands=False, *, config):
        client = real_make_client(for_commands, config=config)
        setattr(client, part, _Without(getattr(client, part), name))
        return client

    real_make_client = sqs_transport.make_client
    monkeypatch.setattr(sqs_transport, 'make_client', make_client)
    caplog.set_level(logging.INFO, logger=direct.__name__)
    transport = SQSTransport(config=settings.config)
    assert transport.direct is None
    _works_through_botocore(transport, sqs.prefix + 'part')
    warnings = _direct_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert name in warnings[0] and 'botocore %s ' % botocore.__version__ in warnings[0] \
        and direct.TESTED_RANGE in warnings[0]
