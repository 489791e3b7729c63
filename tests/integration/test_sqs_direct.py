"""A worker's hot requests built without botocore's pipeline (kale.transport.direct):
the same answers, the same hooks, and botocore's way whenever they fail."""
import socket

import pytest

from kale.conf import settings
from kale.exceptions import EndpointUnreachableError, QueueNotFoundError
from kale.transport import OutgoingMessage, VisibilityChange, direct
from kale.transport.sqs import SQSTransport


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
