"""How many times the SQS transport makes one request, counted where the
requests arrive: a fault proxy (bench/faults.py) in front of the embedded
endpoint. One call costs at most the attempts the settings' reference says,
the direct requests included, and a receive whose answer did not come is
not sent again (SQS may have applied it: each receive raises the receive
count that the redrive policy dead-letters by)."""
import re
import socket

import pytest

from bench.faults import FaultProxy
from kale.app import default_app
from kale.conf import settings
from kale.default_settings import Settings
from kale.exceptions import EndpointUnreachableError, SQSError
from kale.transport import OutgoingMessage, VisibilityChange
from kale.transport import sqs as sqs_transport
from kale.transport.sqs import SQSTransport

#: The read timeout of the transports under test (a worker's waits
#: SQS_READ_TIMEOUT_SEC plus the longest long poll, 21 s at the least): the
#: proxy's "slow" fault holds an answer 2 to 5 s.
READ_TIMEOUT_SEC = 1.0


def documented_attempts() -> int:
    """The attempts of one request, as the settings' reference gives them."""
    meaning = Settings.__dataclass_fields__['SQS_READ_TIMEOUT_SEC'].metadata['doc']
    found = re.search(r'up to (\d+) times', meaning)
    assert found, meaning
    return int(found.group(1))


@pytest.fixture
def proxy(sqs_endpoint):
    found = FaultProxy(sqs_endpoint, seed=7).start()
    yield found
    found.stop()


@pytest.fixture
def short_read_timeout(monkeypatch):
    monkeypatch.setattr(sqs_transport, 'read_timeout_sec', lambda config: READ_TIMEOUT_SEC)


def proxied(proxy, direct, queue):
    """A transport Kale builds (its own client), through ``proxy``, with
    ``queue`` made and its URL known (so that only the requests under test follow)."""
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL=proxy.url, SQS_DIRECT_REQUESTS=direct,
                           SQS_READ_TIMEOUT_SEC=1):
        transport = SQSTransport(config=settings.config)
    assert (transport.direct is not None) == direct
    transport.ensure_queue(queue, 30, None, 0)
    transport.url(queue)
    return transport


@pytest.mark.slow
@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_a_receive_whose_answer_times_out_is_sent_once(sqs, proxy, short_read_timeout, direct):
    queue = sqs.prefix + 'held'
    transport = proxied(proxy, direct, queue)
    transport.send(queue, OutgoingMessage('one'))
    proxy.inject('slow', 600, probability=1.0, operations=['ReceiveMessage'])
    with pytest.raises(EndpointUnreachableError) as raised:
        transport.receive(queue, 10, 0, 30)
    # One request reached the endpoint: it may have been applied, and the
    # message is then out for its visibility timeout, received once.
    assert proxy.requests['ReceiveMessage'] == 1
    assert raised.value.retryable       # the worker backs off, as after any failed receive
    assert re.search('ReceiveMessage .* not made again, as it may have been applied',
                     str(raised.value))


@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_a_receive_that_could_not_connect_is_made_again_up_to_the_documented_attempts(
        sqs, direct):
    """Nothing was sent, so nothing was taken: trying again is safe. Every
    attempt, direct or botocore's, passes the client's before-send event."""
    with socket.socket() as listener:               # a port nothing listens on
        listener.bind(('127.0.0.1', 0))
        port = listener.getsockname()[1]
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:%d' % port,
                           SQS_DIRECT_REQUESTS=direct, SQS_CONNECT_TIMEOUT_SEC=1):
        transport = SQSTransport(config=settings.config)
    transport._urls['q'] = 'http://127.0.0.1:%d/000000000000/q' % port
    sent = []
    transport.client.meta.events.register('before-send.sqs.ReceiveMessage',
                                          lambda **kwargs: sent.append(1))
    with pytest.raises(EndpointUnreachableError, match='unreachable') as raised:
        transport.receive('q', 10, 0, 30)
    assert 'not made again' not in str(raised.value)
    assert len(sent) == documented_attempts()


@pytest.mark.slow
@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_sends_deletes_and_visibility_changes_make_the_documented_attempts(
        sqs, proxy, direct):
    queue = sqs.prefix + 'failing'
    transport = proxied(proxy, direct, queue)
    transport.send_batch(queue, [OutgoingMessage('one'), OutgoingMessage('two')])
    handles = [m.receipt_handle for m in transport.receive(queue, 10, 0, 30)]
    assert len(handles) == 2
    operations = ['SendMessage', 'SendMessageBatch', 'DeleteMessageBatch',
                  'ChangeMessageVisibilityBatch']
    proxy.inject('server_error', 600, probability=1.0, operations=operations)
    before = dict(proxy.requests)
    with pytest.raises(SQSError, match='SendMessage'):
        transport.send(queue, OutgoingMessage('three'))
    with pytest.raises(SQSError, match='SendMessageBatch'):
        transport.send_batch(queue, [OutgoingMessage('three')])
    with pytest.raises(SQSError, match='DeleteMessageBatch'):
        transport.delete_batch(queue, handles)
    with pytest.raises(SQSError, match='ChangeMessageVisibilityBatch'):
        transport.change_visibility_batch(queue, [VisibilityChange(handles[0], 0)])
    made = {operation: proxy.requests[operation] - before.get(operation, 0)
            for operation in operations}
    assert made == dict.fromkeys(operations, documented_attempts())


@pytest.mark.slow
@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_a_delete_whose_answer_times_out_is_made_again(sqs, proxy, short_read_timeout, direct):
    """Deleting twice does the same twice: a delete, unlike a receive, is
    made again after its answer timed out, up to the documented attempts."""
    queue = sqs.prefix + 'slowdelete'
    transport = proxied(proxy, direct, queue)
    transport.send(queue, OutgoingMessage('one'))
    handles = [m.receipt_handle for m in transport.receive(queue, 10, 0, 30)]
    proxy.inject('slow', 600, probability=1.0, operations=['DeleteMessageBatch'])
    with pytest.raises(EndpointUnreachableError, match='unreachable') as raised:
        transport.delete_batch(queue, handles)
    assert 'not made again' not in str(raised.value)
    assert proxy.requests['DeleteMessageBatch'] == documented_attempts()


def test_an_operator_command_makes_each_request_once(sqs, proxy):
    """`kale queues`, `purge` and `dlq redrive` give up in about
    SQS_READ_TIMEOUT_SEC: one attempt, as the settings' reference says."""
    queue = sqs.prefix + 'command'
    proxied(proxy, True, queue)
    meaning = Settings.__dataclass_fields__['SQS_READ_TIMEOUT_SEC'].metadata['doc']
    assert 'wait this plus 1 s, once' in meaning
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL=proxy.url):
        transport = default_app().command_broker.transport
    proxy.inject('server_error', 600, probability=1.0, operations=['SendMessage', 'PurgeQueue'])
    for call in (lambda: transport.send(queue, OutgoingMessage('one')),
                 lambda: transport.purge(queue)):
        with pytest.raises(SQSError):
            call()
    assert (proxy.requests['SendMessage'], proxy.requests['PurgeQueue']) == (1, 1)
