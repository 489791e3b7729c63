"""The boto3 client Kale builds from the settings."""
import json

import pytest

from kale.conf import settings
from kale.transport import MAX_LONG_POLL_SEC, responses, sqs
from kale.transport.sqs import SQSTransport, make_client


def test_the_read_timeout_is_the_setting_beyond_the_longest_long_poll():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:1', SQS_READ_TIMEOUT_SEC=5,
                           SQS_CONNECT_TIMEOUT_SEC=2):
        config = sqs.make_client(config=settings.config).meta.config
    assert config.read_timeout == 5 + MAX_LONG_POLL_SEC
    assert config.connect_timeout == 2


def _without_metadata(answer):
    return {key: value for key, value in answer.items() if key != 'ResponseMetadata'}


def test_hot_answers_read_without_botocores_parser_are_what_botocore_gives(sqs, monkeypatch):
    """Kale's client reads receive, send and batch answers with json.loads:
    the same values botocore's parser gives, binary attributes included."""
    read = []
    monkeypatch.setattr(responses, 'json', type('CountingJson', (), {
        'loads': staticmethod(lambda body: read.append(body) or json.loads(body))}))
    kale = make_client(config=settings.config)
    url = kale.create_queue(QueueName=sqs.prefix + 'answers')['QueueUrl']
    attributes = {'text': {'DataType': 'String', 'StringValue': 'tenant-1'},
                  'count': {'DataType': 'Number', 'StringValue': '7'},
                  'blob': {'DataType': 'Binary', 'BinaryValue': b'\x00\xffkale'}}
    sent = kale.send_message_batch(QueueUrl=url, Entries=[
        {'Id': str(i), 'MessageBody': 'body %d' % i, 'MessageAttributes': attributes}
        for i in range(3)])
    assert sorted(entry['Id'] for entry in sent['Successful']) == ['0', '1', '2']
    arguments = dict(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                     MessageAttributeNames=['All'], MessageSystemAttributeNames=['All'])
    fast = kale.receive_message(**arguments)
    assert len(fast['Messages']) == 3
    assert fast['Messages'][0]['MessageAttributes']['blob']['BinaryValue'] == b'\x00\xffkale'
    slow = sqs.client.receive_message(**arguments)     # botocore's parser
    by_id = {m['MessageId']: m for m in slow['Messages']}
    for message in fast['Messages']:
        expected = dict(by_id[message['MessageId']])
        got = dict(message)
        for answer in (expected, got):      # the receipt and receive count change per receive
            answer.pop('ReceiptHandle')
            answer['Attributes'] = {k: v for k, v in answer['Attributes'].items()
                                    if not k.startswith('Approximate')}
        assert got == expected
    handles = [m['ReceiptHandle'] for m in slow['Messages']]
    deleted = kale.delete_message_batch(QueueUrl=url, Entries=[
        {'Id': 'ok', 'ReceiptHandle': handles[0]}, {'Id': 'bad', 'ReceiptHandle': 'no-such-handle'}])
    assert [entry['Id'] for entry in deleted['Successful']] == ['ok']
    assert [(entry['Id'], entry['SenderFault']) for entry in deleted['Failed']] == [('bad', True)]
    # The create, the send, the receive and the delete; not the raw client's.
    assert len(read) == 4


def test_error_answers_and_xml_answers_are_left_to_botocore():
    from kale.transport.responses import read_json_answer
    json_protocol = type('Model', (), {'metadata': {'protocol': 'json'}})()
    query_protocol = type('Model', (), {'metadata': {'protocol': 'query'}})()
    for model, response in (
            (json_protocol, {'status_code': 400, 'body': b'{"__type": "QueueDoesNotExist"}'}),
            (query_protocol, {'status_code': 200, 'body': b'<ReceiveMessageResponse/>'}),
            (query_protocol, {'status_code': 200, 'body': b'{not json'}),
            (query_protocol, {'status_code': 200, 'body': b''})):
        customized: dict = {}
        body = response['body']
        read_json_answer(response, customized, operation_model=model)
        assert customized == {} and response['body'] == body


def test_a_value_sqs_refuses_comes_back_as_one_sqs_error(sqs):
    """The client does not check parameters itself (Kale builds them): the
    endpoint's refusal is an SQSError naming the request and the queue."""
    from kale.exceptions import SQSError
    transport = SQSTransport(config=settings.config)
    transport.ensure_queue(sqs.prefix + 'refused', 30, None, 0)
    sent = []
    transport.client.meta.events.register('before-send.sqs.ReceiveMessage',
                                          lambda **kwargs: sent.append(1))
    with pytest.raises(SQSError, match=r"ReceiveMessage on queue '.*refused'"):
        transport.receive(sqs.prefix + 'refused', 'ten', 0, 30)    # a type botocore would refuse
    assert sent                 # it reached the endpoint: botocore did not check it first


def test_requests_carry_kales_user_agent_as_given(sqs_endpoint, monkeypatch, settings_env):
    """The User-Agent is given whole (botocore would build its own for every
    request): requests say they come from Kale."""
    monkeypatch.setenv('KALE_TEST_ENDPOINT', sqs_endpoint)
    settings_env()
    client = make_client(config=settings.config)
    sent = []
    client.meta.events.register('before-send.sqs', lambda request, **kw: sent.append(
        request.headers['User-Agent']))
    client.list_queues(QueueNamePrefix='kale-agent-')
    assert sent
    agent = sent[0].decode() if isinstance(sent[0], bytes) else sent[0]
    assert agent.startswith(sqs.user_agent())
    assert agent.startswith('kale-sqs/')


def _no_credentials_anywhere(monkeypatch):
    for name in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', '/nonexistent')
    monkeypatch.setenv('AWS_CONFIG_FILE', '/nonexistent')
    monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')


def test_no_credentials_is_one_line_for_sqs_and_for_s3(sqs_endpoint, monkeypatch):
    from kale.exceptions import ImproperlyConfigured
    from kale.transport.s3 import S3PayloadStore, make_s3_client
    _no_credentials_anywhere(monkeypatch)
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL=sqs_endpoint, AWS_ACCESS_KEY_ID='',
                           AWS_SECRET_ACCESS_KEY='', AWS_REGION='us-east-1'):
        with pytest.raises(ImproperlyConfigured, match='no usable AWS credentials'):
            SQSTransport(config=settings.config).queue_exists('kale-no-credentials')
        with pytest.raises(ImproperlyConfigured, match='no usable AWS credentials'):
            S3PayloadStore(make_s3_client(settings.config)).get('kale-no-credentials', 'k', 10)
