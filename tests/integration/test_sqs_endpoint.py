"""Publishing against a real SQS endpoint (`kale sqs-local`) over HTTP."""
import contextlib
import json
import os

import pytest

from kale.app import default_app
from kale.conf import settings
from kale.exceptions import BatchSendError, EndpointUnreachableError, QueueNotFoundError
from kale.queue_config import build_queue_config
from kale.transport import OutgoingMessage
from kale.transport import sqs as kale_sqs
from tests import tasks
from tests.support.endpoint import raw_client


@contextlib.contextmanager
def count_requests():
    """Record the SQS operation of every HTTP request Kale's client sends."""
    operations = []

    def record(event_name, **kwargs):
        operations.append(event_name.rsplit('.', 1)[-1])

    events = default_app().transport.client.meta.events
    events.register('before-send.sqs', record, unique_id='test-count-requests')
    try:
        yield operations
    finally:
        events.unregister('before-send.sqs', unique_id='test-count-requests')


def test_publish_lands_a_message_with_its_attributes(sqs):
    task_id = tasks.AddTask.publish({'app': 1}, 2, 3)
    [received] = sqs.receive_all('default', expected=1)
    message = sqs.decode(received['Body'])
    assert message.task_id == task_id
    assert message.args == (2, 3)
    attributes = {k: v['StringValue'] for k, v in received['MessageAttributes'].items()}
    assert attributes == {'kale_task_id': task_id, 'kale_task_name': 'tests.tasks.AddTask',
                          'kale_retry_num': '0', 'kale_failure_num': '0'}
    assert received['MessageAttributes']['kale_retry_num']['DataType'] == 'Number'


def test_publish_batch_of_25_makes_3_requests(sqs):
    tasks.AddTask.publish(None, 0, 0)   # first use creates the queues
    sqs.receive_all('default', expected=1)
    with count_requests() as operations:
        ids = tasks.AddTask.publish_batch(None, [((i, i), {}) for i in range(25)])
    assert operations == ['SendMessageBatch'] * 3
    received = sqs.receive_all('default', expected=25)
    assert sorted(sqs.decode(r['Body']).task_id for r in received) == sorted(ids)
    assert {r['MessageAttributes']['kale_task_id']['StringValue'] for r in received} == set(ids)


def test_single_publish_makes_one_request_once_the_queue_is_known(sqs):
    tasks.AddTask.publish(None, 0, 0)
    with count_requests() as operations:
        tasks.AddTask.publish(None, 1, 1)
    assert operations == ['SendMessage']


def test_batches_are_split_by_request_size(sqs):
    tasks.EchoTask.publish(None)
    sqs.receive_all('default', expected=1)
    payload = os.urandom(120000)  # incompressible: each message about 160 KB, ten over 1 MiB
    with count_requests() as operations:
        tasks.EchoTask.publish_batch(None, [((payload, i), {}) for i in range(10)])
    assert operations.count('SendMessageBatch') >= 2
    assert len(sqs.receive_all('default', expected=10)) == 10


def test_delayed_publish_is_not_visible_at_once(sqs):
    tasks.AddTask.publish(None, 1, 2, delay_sec=60)
    assert sqs.receive_all('default', timeout=0.5) == []
    counts = default_app().broker.counts(build_queue_config(settings.config)['default'])
    assert counts.delayed == 1


def test_queue_and_dead_letter_queue_are_created_with_a_redrive_policy(sqs):
    with settings.override(MAX_RECEIVE_COUNT=4):
        tasks.HighTask.publish(None)
    url = sqs.queue_url('high')
    dlq_url = sqs.queue_url('dlq-high')
    attributes = sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes']
    dlq_arn = sqs.client.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
    policy = json.loads(attributes['RedrivePolicy'])
    assert policy['deadLetterTargetArn'] == dlq_arn
    assert int(policy['maxReceiveCount']) == 4
    assert attributes['VisibilityTimeout'] == '30'


def test_queue_prefix_keeps_environments_apart(sqs, monkeypatch, settings_env):
    tasks.AddTask.publish(None, 1, 1)
    monkeypatch.setenv('KALE_TEST_PREFIX', sqs.prefix + 'other-')
    settings_env()
    tasks.AddTask.publish(None, 2, 2)
    tasks.AddTask.publish(None, 3, 3)
    mine = sqs.receive_all('default', expected=1)
    theirs = sqs.receive_all('other-default', expected=2)
    assert [sqs.decode(m['Body']).args for m in mine] == [(1, 1)]
    assert sorted(sqs.decode(m['Body'], 'other-default').args for m in theirs) == [(2, 2), (3, 3)]
    names = sqs.client.list_queues(QueueNamePrefix=sqs.prefix).get('QueueUrls', [])
    assert all(url.rsplit('/', 1)[-1].startswith(sqs.prefix) for url in names)


def test_missing_queue_is_an_error_when_creation_is_off(sqs):
    with settings.override(CREATE_MISSING_QUEUES=False):
        with pytest.raises(QueueNotFoundError, match="queue 'default'.*does not exist and "
                                                     'CREATE_MISSING_QUEUES is off'):
            tasks.AddTask.publish(None, 1, 1)


def test_a_queue_deleted_under_a_running_publisher_is_declared_again(sqs):
    """The request that meets the deleted queue fails with QueueNotFoundError;
    the next one creates the queue again, and its message lands."""
    tasks.AddTask.publish(None, 0, 0)           # declares the queue
    sqs.receive_all('default', expected=1)
    url = sqs.client.get_queue_url(QueueName=sqs.prefix + 'default')['QueueUrl']
    sqs.client.delete_queue(QueueUrl=url)
    with pytest.raises(QueueNotFoundError):
        tasks.AddTask.publish(None, 1, 1)
    task_id = tasks.AddTask.publish(None, 2, 2)
    [received] = sqs.receive_all('default', expected=1)
    assert sqs.decode(received['Body']).task_id == task_id


def test_unreachable_endpoint_is_a_typed_error(sqs):
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:%d' % port,
                           SQS_CONNECT_TIMEOUT_SEC=1):
        with pytest.raises(EndpointUnreachableError, match='unreachable'):
            tasks.AddTask.publish(None, 1, 1)


def test_partial_batch_failures_are_retried_then_reported(sqs):
    """A stub client answers with failures: server-side ones are retried, sender ones reported."""
    from botocore.stub import Stubber
    client = raw_client(sqs.url)
    transport = kale_sqs.SQSTransport(client, config=settings.config)
    transport._urls['q'] = 'http://queue/q'
    messages = [OutgoingMessage('body%d' % i) for i in range(3)]
    with Stubber(client) as stub:
        stub.add_response('send_message_batch', {
            'Successful': [{'Id': '0', 'MessageId': 'id0', 'MD5OfMessageBody': 'x'}],
            'Failed': [{'Id': '1', 'SenderFault': False, 'Code': 'InternalError'},
                       {'Id': '2', 'SenderFault': False, 'Code': 'InternalError'}]})
        stub.add_response('send_message_batch', {
            'Successful': [{'Id': '1', 'MessageId': 'id1', 'MD5OfMessageBody': 'x'},
                           {'Id': '2', 'MessageId': 'id2', 'MD5OfMessageBody': 'x'}],
            'Failed': []})
        assert transport.send_batch('q', messages) == ['id0', 'id1', 'id2']
    with Stubber(client) as stub:
        stub.add_response('send_message_batch', {
            'Successful': [{'Id': '0', 'MessageId': 'id0', 'MD5OfMessageBody': 'x'},
                           {'Id': '1', 'MessageId': 'id1', 'MD5OfMessageBody': 'x'}],
            'Failed': [{'Id': '2', 'SenderFault': True, 'Code': 'InvalidMessageContents',
                        'Message': 'bad'}]})
        with pytest.raises(BatchSendError, match='1 of 3 messages not sent') as info:
            transport.send_batch('q', messages)
    assert info.value.failed == {2: ('InvalidMessageContents', 'bad')}
    assert info.value.message_ids == ['id0', 'id1', None]
