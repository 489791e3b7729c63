"""SQS answers of the wrong shape (kale.transport.responses): each is one
retryable SQSError, code MalformedAnswer, naming what is wrong, never a
KeyError, TypeError, ValueError, IndexError or RecursionError from the reader."""
import contextlib
import json

import pytest

from kale.exceptions import SQSError
from kale.transport import QueueCounts
from kale.transport.responses import (
    MALFORMED_ANSWER,
    batch_entries,
    field,
    json_answer,
    queue_counts,
    read_json_answer,
    received_messages,
)

#: Deeper than the recursion limit of any JSON parser.
DEEP = 100_000


@contextlib.contextmanager
def malformed(says=''):
    """The block raises the one error of an answer of the wrong shape, saying ``says``."""
    with pytest.raises(SQSError) as raised:
        yield raised
    error = raised.value
    assert (error.code, error.retryable) == (MALFORMED_ANSWER, True)
    assert says in str(error) and '\n' not in str(error)


def message(**changed):
    found = {'MessageId': 'm-1', 'ReceiptHandle': 'h-1', 'Body': 'secret payload',
             'Attributes': {'ApproximateReceiveCount': '2',
                            'ApproximateFirstReceiveTimestamp': '1000'},
             'MessageAttributes': {'tenant': {'DataType': 'String', 'StringValue': 'acme'}}}
    found.update(changed)
    return {k: v for k, v in found.items() if v is not None}


def receive(answer, attribute_names=('All',)):
    return received_messages(answer, attribute_names, 5000.0)


def test_a_well_formed_answer_is_read():
    [got] = receive({'Messages': [message()]})
    assert (got.message_id, got.receipt_handle, got.body) == ('m-1', 'h-1', 'secret payload')
    assert (got.receive_count, got.since_first_receive_sec) == (2, 4.0)
    assert got.attributes == {'tenant': 'acme'}
    assert receive({}) == [] and receive({'Messages': []}) == []


@pytest.mark.parametrize('answer, says', [
    ({'Messages': 'm-1'}, 'Messages is a string, not a list'),
    ({'Messages': {'MessageId': 'm-1'}}, 'Messages is an object, not a list'),
    ({'Messages': ['m-1']}, 'a message is a string, not an object'),
    ({'Messages': [[message()]]}, 'a message is a list, not an object'),
    ({'Messages': [message(MessageId=None)]}, 'a message has no MessageId'),
    ({'Messages': [message(MessageId=7)]}, 'a message has no MessageId'),
    ({'Messages': [message(ReceiptHandle=None)]}, "message 'm-1' has no ReceiptHandle"),
    ({'Messages': [message(Body=None)]}, "message 'm-1' has no Body"),
    ({'Messages': [message(Body={'a': 1})]}, "message 'm-1' has no Body"),
    ({'Messages': [message(ReceiptHandle=None, Body=None)]}, 'has no ReceiptHandle, Body'),
    ({'Messages': [message(Attributes='2')]}, "'m-1': Attributes is a string"),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': 'many'})]},
     "'m-1': ApproximateReceiveCount is 'many', not a whole number from 1"),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': 3})]},
     'ApproximateReceiveCount is 3, not'),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': '0'})]},
     "ApproximateReceiveCount is '0', not"),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': '-2'})]},
     "ApproximateReceiveCount is '-2', not"),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': '\u00b2'})]},
     'ApproximateReceiveCount'),
    ({'Messages': [message(Attributes={'ApproximateReceiveCount': '9' * 5000})]},
     'ApproximateReceiveCount'),
    ({'Messages': [message(Attributes={'MessageGroupId': ['g']})]},
     "'m-1': MessageGroupId is a list, not a string"),
    ({'Messages': [message(MessageAttributes=['tenant'])]}, 'MessageAttributes is a list'),
    ({'Messages': [message(MessageAttributes={'tenant': 'acme'})]},
     "message attribute 'tenant' is not an object"),
    ({'Messages': [message(MessageAttributes={'tenant': {'StringValue': 7}})]},
     "message attribute 'tenant'"),
])
def test_a_receive_answer_of_the_wrong_shape_is_one_malformed_answer_error(answer, says):
    with malformed(says) as raised:
        receive(answer)
    assert 'secret payload' not in str(raised.value)


def test_a_first_receive_time_that_is_not_a_number_is_unknown_not_an_error():
    [got] = receive({'Messages': [message(Attributes={
        'ApproximateReceiveCount': '2', 'ApproximateFirstReceiveTimestamp': '\u00b2'})]})
    assert (got.receive_count, got.since_first_receive_sec) == (2, None)


def test_attributes_not_asked_for_are_not_read():
    [got] = receive({'Messages': [message(MessageAttributes={'other': 'not an object'})]},
                    ('tenant',))
    assert got.attributes == {}


@pytest.mark.parametrize('body, says', [
    (b'{"Messages": ' + b'[' * DEEP + b']' * DEEP + b'}', 'nested too deeply'),
    (b'[' * DEEP + b']' * DEEP, 'nested too deeply'),
    (b'["m-1"]', 'the answer is a list, not an object'),
    (b'"m-1"', 'the answer is a string, not an object'),
    (b'null', 'the answer is null, not an object'),
    (json.dumps({'Messages': [message(MessageAttributes={
        'blob': {'DataType': 'Binary', 'BinaryValue': 'not base64!'}})]}).encode(),
     "BinaryValue of message attribute 'blob' is not base64"),
    (json.dumps({'Messages': [message(MessageAttributes={
        'blob': {'DataType': 'Binary', 'BinaryValue': 7}})]}).encode(),
     "BinaryValue of message attribute 'blob' is not base64"),
])
def test_a_json_body_of_the_wrong_shape_is_one_malformed_answer_error(body, says):
    with malformed(says):
        json_answer(body)


def test_a_body_that_is_not_json_says_nothing_and_botocores_fields_are_its_own():
    assert json_answer(b'{"Messages": [{"Mess') is None            # cut short
    assert json_answer(b'\xff\xfe{') is None
    assert json_answer(b'') is None
    assert json_answer(b' {"Messages": []}') == {'Messages': []}
    assert json_answer(b'{"ResponseMetadata": "x", "MessageId": "m"}') == {'MessageId': 'm'}
    assert json_answer(b'{"Messages": "m", "x": [1]}') == {'Messages': 'm', 'x': [1]}


class JsonOperation:
    metadata = {'protocol': 'json'}


@pytest.mark.parametrize('body', [b'[1]', b'"x"', b'null', b' {"x": 1}', b'\xff\xfe', b'{cut',
                                  b'{"Messages": "x"}'])
def test_botocores_parser_never_walks_a_successful_json_answer(body):
    """botocore's own parser raises AttributeError on a list or string where
    its model has a map, and UnicodeDecodeError on bytes that are not UTF-8:
    the handler leaves it an empty object, or raises the one error."""
    response = {'status_code': 200, 'body': body, 'headers': {}}
    customized: dict = {}
    try:
        read_json_answer(response, customized, operation_model=JsonOperation())
    except SQSError as error:
        assert error.code == MALFORMED_ANSWER
    else:
        assert response['body'] == b'{}'


@pytest.mark.parametrize('body, kept', [
    (b'{"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "gone"}', True),
    (b'<html>Bad Gateway</html>', True),
    (b'', True),
    (b'[1]', False),
    (b'"x"', False),
    (b'{"__type": 7}', False),
    (b'{"message": {"a": 1}}', False),
    (b'{"Message": ["a"]}', False),
    (b'\xff\xfe', False),
    (b'[' * DEEP + b']' * DEEP, False),
])
def test_an_error_answer_botocore_cannot_read_reaches_it_empty(body, kept):
    response = {'status_code': 500, 'body': body, 'headers': {}}
    read_json_answer(response, {}, operation_model=JsonOperation())
    assert response['body'] == (body if kept else b'')


@pytest.mark.parametrize('answer, says', [
    ({'Successful': 'all'}, 'Successful is a string, not a list'),
    ({'Failed': {'Id': '0'}}, 'Failed is an object, not a list'),
    ({'Successful': ['0']}, "an entry of Successful is a string, not an object"),
    ({'Successful': [{'Id': 'x'}]}, "Successful has the Id 'x', not one of the 3 sent"),
    ({'Successful': [{'Id': '3'}]}, "the Id '3', not one of the 3 sent"),
    ({'Successful': [{'Id': '-1'}]}, "the Id '-1', not one of the 3 sent"),
    ({'Successful': [{'Id': '99999999999999999999999'}]}, 'not one of the 3 sent'),
    ({'Successful': [{'Id': 0}]}, 'the Id 0, not one of the 3 sent'),
    ({'Successful': [{'Id': '0.0'}]}, "the Id '0.0', not one"),
    ({'Failed': [{'Id': ['0']}]}, 'the Id a list'),
    ({'Failed': [{'MessageId': 'm'}]}, 'the Id null'),
    ({'Successful': [{'Id': '1'}, {'Id': '1'}]}, "the Id '1' is named twice"),
    ({'Successful': [{'Id': '1'}], 'Failed': [{'Id': '1'}]}, "the Id '1' is named twice"),
    ({'Failed': [{'Id': '2', 'SenderFault': 'false'}]}, "Failed entry with the Id '2'"),
    ({'Failed': [{'Id': '2', 'Code': 500}]}, "Failed entry with the Id '2'"),
])
def test_a_batch_answer_of_the_wrong_shape_is_one_malformed_answer_error(answer, says):
    with malformed(says):
        batch_entries(answer, range(3))


def test_a_send_batch_answer_without_message_ids_is_malformed():
    with malformed("Successful entry with the Id '4'"):
        batch_entries({'Successful': [{'Id': '4', 'MessageId': 12}]}, [4, 5], 'MessageId')


def test_a_batch_answer_names_entries_by_their_index_in_what_was_sent():
    succeeded, failed = batch_entries({'Successful': [{'Id': '4', 'MessageId': 'm'}],
                                       'Failed': [{'Id': '7', 'Code': 'X', 'SenderFault': True}]},
                                      [4, 5, 7], 'MessageId')
    assert list(succeeded) == [4] and list(failed) == [7]
    assert batch_entries({}, [4]) == ({}, {})           # cut short: names none
    with malformed("'5', not one of the 2 sent"):
        batch_entries({'Successful': [{'Id': '5'}]}, [4, 6])


@pytest.mark.parametrize('attributes, says', [
    ({'ApproximateNumberOfMessages': 'lots'}, "ApproximateNumberOfMessages is 'lots'"),
    ({'ApproximateNumberOfMessagesNotVisible': 3.5}, 'is 3.5, not a whole number'),
    ({'ApproximateNumberOfMessagesDelayed': '-1'}, "is '-1', not a whole number"),
    ({'ApproximateNumberOfMessages': '1' * 30}, 'not a whole number'),
    (['ApproximateNumberOfMessages'], 'Attributes is a list, not an object'),
])
def test_queue_counts_of_the_wrong_shape_are_one_malformed_answer_error(attributes, says):
    with malformed(says):
        queue_counts(attributes)


def test_queue_counts_are_read():
    assert queue_counts({'ApproximateNumberOfMessages': '3',
                         'ApproximateNumberOfMessagesNotVisible': '1'}) == QueueCounts(3, 1, 0)


def test_a_field_of_the_wrong_type_is_malformed_and_a_missing_one_is_none():
    assert field({'Attributes': {'QueueArn': 'arn'}}, ('Attributes', 'QueueArn'), str) == 'arn'
    assert field({'Attributes': {}}, ('Attributes', 'QueueArn'), str) is None
    with malformed('QueueUrl is an object, not a string'):
        field({'QueueUrl': {}}, ('QueueUrl',), str)
    with malformed('Attributes is a list, not an object'):
        field({'Attributes': ['QueueArn']}, ('Attributes', 'QueueArn'), str)
