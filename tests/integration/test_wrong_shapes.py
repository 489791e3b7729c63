"""An endpoint that answers 200 with the wrong shape (bench/faults.py's
``wrong_shape``, in front of the embedded endpoint): every request of the
SQS transport, sent directly or through botocore, fails with one retryable
SQSError line (code MalformedAnswer) naming the request, and a message received in such
an answer is left to its visibility timeout."""
import pytest

from bench.faults import WRONG_SHAPES, FaultProxy
from kale.conf import settings
from kale.exceptions import SQSError
from kale.transport import OutgoingMessage, VisibilityChange
from kale.transport.responses import MALFORMED_ANSWER
from kale.transport.sqs import SQSTransport
from tests.support.processes import wait_for


@pytest.fixture
def proxy(sqs_endpoint):
    found = FaultProxy(sqs_endpoint, seed=1).start()
    yield found
    found.stop()


@pytest.fixture(params=[True, False], ids=['direct', 'botocore'])
def transport(request, sqs, proxy):
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL=proxy.url,
                           SQS_DIRECT_REQUESTS=request.param):
        made = SQSTransport(config=settings.config)
    assert (made.direct is not None) == request.param
    return made


def queue_with(sqs, transport, name, bodies=()):
    queue = sqs.prefix + name
    transport.ensure_queue(queue, 30, None, 0)
    for body in bodies:
        sqs.client.send_message(QueueUrl=sqs.queue_url(name), MessageBody=body)
    return queue


def each_shape_fails(proxy, transport, operation, queue, call):
    """``call`` fails once with each wrong shape of ``operation``'s answer."""
    shapes = WRONG_SHAPES[operation]
    proxy.inject('wrong_shape', 60, probability=1.0, operations=[operation])
    for _ in shapes:
        with pytest.raises(SQSError) as raised:
            call()
        text = str(raised.value)
        assert text.startswith('%s on queue %r: the answer from %s is malformed: '
                               % (operation, queue, proxy.url)), text
        assert '\n' not in text and raised.value.retryable
        assert raised.value.code == MALFORMED_ANSWER
    proxy.calm()
    assert {name: proxy.shapes[(operation, name)] for name in shapes} == dict.fromkeys(shapes, 1)


def test_a_receive_answer_of_the_wrong_shape_leaves_its_messages_to_the_visibility_timeout(
        sqs, proxy, transport):
    queue = queue_with(sqs, transport, 'receive', ['task-1'])
    shapes = WRONG_SHAPES['ReceiveMessage']
    each_shape_fails(proxy, transport, 'ReceiveMessage', queue,
                     lambda: transport.receive(queue, 10, 0, 1))
    assert proxy.requests['ReceiveMessage'] == len(shapes)     # none sent again through botocore
    found = []
    wait_for(lambda: found.extend(transport.receive(queue, 10, 0, 30)) or found, 20,
             'the message to come back after its visibility timeout')
    assert [m.body for m in found] == ['task-1']
    assert found[0].receive_count >= 2          # received in a wrong answer first


def test_batch_answers_of_the_wrong_shape_fail_the_request(sqs, proxy, transport):
    queue = queue_with(sqs, transport, 'batches', ['a', 'b'])
    received = []
    wait_for(lambda: received.extend(transport.receive(queue, 10, 0, 30)) or len(received) == 2,
             10, 'both messages')
    handles = [m.receipt_handle for m in received]
    each_shape_fails(proxy, transport, 'ChangeMessageVisibilityBatch', queue,
                     lambda: transport.change_visibility_batch(
                         queue, [VisibilityChange(handle, 30) for handle in handles]))
    each_shape_fails(proxy, transport, 'DeleteMessageBatch', queue,
                     lambda: transport.delete_batch(queue, handles))
    each_shape_fails(proxy, transport, 'SendMessageBatch', queue,
                     lambda: transport.send_batch(queue, [OutgoingMessage('c'),
                                                          OutgoingMessage('d')]))


def test_send_and_queue_answers_of_the_wrong_shape_fail_the_request(sqs, proxy, transport):
    queue = queue_with(sqs, transport, 'queue')
    each_shape_fails(proxy, transport, 'SendMessage', queue,
                     lambda: transport.send(queue, OutgoingMessage('e')))
    each_shape_fails(proxy, transport, 'GetQueueAttributes', queue,
                     lambda: transport.counts(queue))

    def url():
        transport._urls.clear()
        return transport.url(queue)
    each_shape_fails(proxy, transport, 'GetQueueUrl', queue, url)
    assert transport.url(queue).endswith('/' + queue)           # nothing wrong was kept
