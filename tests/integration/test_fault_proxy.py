"""The chaos run's fault-injecting proxy (bench/faults.py) fails requests
the way SQS does, in front of the embedded endpoint."""
import time
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from bench.faults import FaultProxy
from kale.conf import settings


@pytest.fixture
def proxy(sqs_endpoint):
    found = FaultProxy(sqs_endpoint, seed=1).start()
    yield found
    found.stop()


def client(url, attempts=1):
    return boto3.client('sqs', endpoint_url=url, region_name='us-east-1',
                        aws_access_key_id='test', aws_secret_access_key='test',
                        config=Config(retries={'mode': 'standard', 'total_max_attempts': attempts},
                                      read_timeout=10))


@pytest.fixture
def queue(sqs_endpoint):
    direct = client(sqs_endpoint)
    url = direct.create_queue(QueueName='fp-%s' % uuid.uuid4().hex[:8])['QueueUrl']
    return direct, url


def bodies(direct, url):
    found = []
    while True:
        batch = direct.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                       VisibilityTimeout=60).get('Messages', [])
        if not batch:
            return sorted(m['Body'] for m in found)
        found.extend(batch)


def test_requests_pass_untouched_without_a_burst(proxy, queue):
    direct, url = queue
    client(proxy.url).send_message(QueueUrl=url, MessageBody='a')
    assert bodies(direct, url) == ['a'] and proxy.requests['SendMessage'] == 1


@pytest.mark.parametrize('kind, codes', [('throttle', {'ThrottlingException', 'RequestThrottled'}),
                                         ('server_error', {'InternalError', 'ServiceUnavailable'})])
def test_throttling_and_server_errors_are_answered_and_not_applied(proxy, queue, kind, codes):
    direct, url = queue
    proxy.inject(kind, 30, probability=1.0, operations=['SendMessage'])
    with pytest.raises(ClientError) as raised:
        client(proxy.url).send_message(QueueUrl=url, MessageBody='a')
    assert raised.value.response['Error']['Code'] in codes
    assert bodies(direct, url) == [] and proxy.summary() == {kind: 1}


def test_an_answer_lost_after_the_request_was_applied(proxy, queue):
    direct, url = queue
    proxy.inject('lost_answer', 30, probability=1.0, operations=['SendMessage'])
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        client(proxy.url).send_message(QueueUrl=url, MessageBody='a')
    assert bodies(direct, url) == ['a']                  # applied all the same
    assert proxy.applied_unanswered['SendMessage'] == 1


def test_an_answer_cut_short_reaches_botocore_as_one_that_says_nothing(proxy, queue):
    """botocore parses a cut JSON body as an empty answer, without an error:
    what Kale's transport must not take for success (see below)."""
    direct, url = queue
    proxy.inject('cut_answer', 30, probability=1.0, operations=['SendMessage'])
    answer = client(proxy.url).send_message(QueueUrl=url, MessageBody='a')
    assert 'MessageId' not in answer
    assert bodies(direct, url) == ['a']


def test_a_partial_batch_failure_says_what_was_not_applied(proxy, queue):
    direct, url = queue
    proxy.inject('partial_batch', 30, probability=1.0)
    answer = client(proxy.url).send_message_batch(QueueUrl=url, Entries=[
        {'Id': str(i), 'MessageBody': 'm%d' % i} for i in range(10)])
    failed = {entry['Id'] for entry in answer['Failed']}
    sent = {entry['Id'] for entry in answer['Successful']}
    assert failed and failed.isdisjoint(sent) and failed | sent == {str(i) for i in range(10)}
    assert bodies(direct, url) == sorted('m%s' % i for i in sent)


@pytest.mark.real_time('the proxy holds a request for 2-5 s of real time')
def test_a_latency_spike_holds_the_request(proxy, queue):
    _, url = queue
    proxy.inject('slow', 30, probability=1.0, operations=['GetQueueAttributes'])
    started = time.monotonic()
    client(proxy.url).get_queue_attributes(QueueUrl=url, AttributeNames=['All'])
    assert time.monotonic() - started >= 2.0


@pytest.mark.real_time('the proxy holds every request for its latency, in real time')
def test_a_steady_latency_holds_every_request(proxy, queue):
    """``latency_sec``: a slow endpoint for the whole run (bench.chaos --latency-ms)."""
    _, url = queue
    proxy.latency_sec = 0.3
    started = time.monotonic()
    for _ in range(2):
        client(proxy.url).get_queue_attributes(QueueUrl=url, AttributeNames=['All'])
    assert time.monotonic() - started >= 0.6 and proxy.summary() == {}


def test_an_unknown_fault_is_refused(proxy):
    with pytest.raises(ValueError, match='unknown fault'):
        proxy.inject('gremlins', 1)


# --- what Kale's transport makes of them ---------------------------------------------

@pytest.fixture
def kale_transport(proxy, queue):
    from kale.transport.sqs import SQSTransport
    _, url = queue
    transport = SQSTransport(client(proxy.url, attempts=3), config=settings.config)
    return transport, url.rsplit('/', 1)[1]


def test_a_batch_send_whose_answer_was_cut_is_sent_again_not_taken_for_sent(
        proxy, queue, kale_transport):
    """Regression: a cut answer parses as one that names no entry, and the
    send counted as done although the transport could not know."""
    from kale.transport import OutgoingMessage
    direct, url = queue
    transport, name = kale_transport
    proxy.inject('cut_answer', 30, probability=1.0, operations=['SendMessageBatch'])
    from kale.exceptions import BatchSendError
    with pytest.raises(BatchSendError, match='NoAnswer'):
        transport.send_batch(name, [OutgoingMessage('task-1')])
    proxy.calm()
    assert set(bodies(direct, url)) == {'task-1'}          # applied, perhaps more than once


def test_a_batch_delete_whose_answer_was_cut_counts_as_failed(proxy, queue, kale_transport):
    direct, url = queue
    transport, name = kale_transport
    direct.send_message(QueueUrl=url, MessageBody='x')
    [received] = transport.receive(name, 1, 0, 30)
    proxy.inject('cut_answer', 30, probability=1.0, operations=['DeleteMessageBatch'])
    assert transport.delete_batch(name, [received.receipt_handle]) == [received.receipt_handle]


def test_batch_deletes_that_failed_on_sqss_side_are_tried_again(proxy, queue, kale_transport):
    """Regression (the chaos run's partial-batch scenario): a delete entry that
    failed with InternalError was given up at once, so its task ran again."""
    direct, url = queue
    transport, name = kale_transport
    for i in range(10):
        direct.send_message(QueueUrl=url, MessageBody='m%d' % i)
    received = []
    while len(received) < 10:
        received += transport.receive(name, 10, 0, 60)
    proxy.inject('partial_batch', 30, probability=0.5, operations=['DeleteMessageBatch'])
    assert transport.delete_batch(name, [m.receipt_handle for m in received]) == []
    assert proxy.summary().get('partial_batch', 0) >= 1
    proxy.calm()
    counts = direct.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes']
    assert counts['ApproximateNumberOfMessages'] == counts['ApproximateNumberOfMessagesNotVisible'] \
        == '0'


def test_a_partial_failure_on_a_fifo_queue_fails_the_rest_of_the_group(proxy, sqs_endpoint):
    direct = client(sqs_endpoint)
    url = direct.create_queue(QueueName='fp-%s.fifo' % uuid.uuid4().hex[:8], Attributes={
        'FifoQueue': 'true', 'ContentBasedDeduplication': 'true'})['QueueUrl']
    proxy.inject('partial_batch', 30, probability=1.0)
    entries = [{'Id': str(i), 'MessageBody': 'm%d' % i, 'MessageGroupId': 'g%d' % (i % 2)}
               for i in range(10)]
    answer = client(proxy.url).send_message_batch(QueueUrl=url, Entries=entries)
    failed = {int(entry['Id']) for entry in answer['Failed']}
    for group in (0, 1):
        members = [i for i in range(10) if i % 2 == group]
        flags = [i in failed for i in members]
        assert flags == sorted(flags), 'a failure in %s is followed by a success' % members


def test_a_single_send_whose_answer_was_cut_is_a_retryable_error_not_a_key_error(
        proxy, queue, kale_transport):
    """Regression (the full chaos run's publisher crashed): a cut SendMessage
    answer parses as an empty one, and indexing its MessageId raised KeyError."""
    from kale.exceptions import SQSError
    from kale.transport import OutgoingMessage
    from kale.transport.sqs import NO_ANSWER
    direct, url = queue
    transport, name = kale_transport
    proxy.inject('cut_answer', 30, probability=1.0, operations=['SendMessage'])
    with pytest.raises(SQSError, match='no MessageId') as raised:
        transport.send(name, OutgoingMessage('task-1'))
    assert raised.value.code == NO_ANSWER and raised.value.retryable
    proxy.calm()
    assert set(bodies(direct, url)) == {'task-1'}


def test_queue_counts_from_a_cut_answer_are_a_retryable_error(proxy, queue, kale_transport):
    from kale.exceptions import SQSError
    transport, name = kale_transport
    transport.url(name)
    proxy.inject('cut_answer', 30, probability=1.0, operations=['GetQueueAttributes'])
    with pytest.raises(SQSError, match='no Attributes') as raised:
        transport.counts(name)
    assert raised.value.retryable
