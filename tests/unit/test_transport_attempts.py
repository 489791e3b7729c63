"""Which failed SQS requests the transport makes again (kale.transport.attempts),
without a network: what each failure means for a receive and for the rest."""
import botocore.exceptions
import pytest

from kale.transport.attempts import REQUEST_ATTEMPTS, Attempts, again
from kale.transport.direct import ErrorAnswer

URL = 'http://127.0.0.1:1/'


def client_error(status, code):
    return botocore.exceptions.ClientError(
        {'Error': {'Code': code, 'Message': 'x'}, 'ResponseMetadata': {'HTTPStatusCode': status}},
        'ReceiveMessage')


#: (failure, made again for a receive, made again for a delete or a send)
FAILURES = [
    (botocore.exceptions.EndpointConnectionError(endpoint_url=URL), True, True),
    (botocore.exceptions.ConnectTimeoutError(endpoint_url=URL), True, True),
    (botocore.exceptions.ReadTimeoutError(endpoint_url=URL), False, True),
    (botocore.exceptions.ConnectionClosedError(endpoint_url=URL), False, True),
    (ErrorAnswer(200), False, True),                # answered, but not readable
    (ErrorAnswer(400), True, True),                 # botocore makes it again and reads the error
    (ErrorAnswer(503), True, True),
    (client_error(500, 'InternalError'), True, True),
    (client_error(400, 'ThrottlingException'), True, True),
    (client_error(400, 'RequestThrottled'), True, True),
    (client_error(400, 'QueueDoesNotExist'), False, False),
    (client_error(400, 'InvalidParameterValue'), False, False),
    (botocore.exceptions.NoCredentialsError(), False, False),
]


@pytest.mark.parametrize('failure, receive, others', FAILURES,
                         ids=[type(f[0]).__name__ + str(i) for i, f in enumerate(FAILURES)])
def test_a_receive_is_made_again_only_when_it_took_nothing(failure, receive, others):
    assert again('ReceiveMessage', failure) is receive
    for action in ('DeleteMessageBatch', 'ChangeMessageVisibilityBatch', 'SendMessage',
                   'SendMessageBatch', 'GetQueueUrl'):
        assert again(action, failure) is others


def failing(failures):
    """A call that raises each of ``failures`` in turn, then answers; and its calls."""
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return {'ok': len(calls)}
    return call, calls


def test_a_request_is_made_up_to_the_limit_with_a_growing_pause_between():
    pauses = []
    attempts = Attempts(REQUEST_ATTEMPTS, sleep=pauses.append)
    call, calls = failing([client_error(500, 'InternalError')] * 5)
    with pytest.raises(botocore.exceptions.ClientError):
        attempts.make('DeleteMessageBatch', call)
    assert len(calls) == REQUEST_ATTEMPTS == 3
    assert len(pauses) == 2 and 0.125 <= pauses[0] <= 0.25 and 0.25 <= pauses[1] <= 0.5
    call, calls = failing([client_error(500, 'InternalError')])
    assert attempts.make('DeleteMessageBatch', call) == {'ok': 2}


def test_the_direct_attempt_is_the_first_and_botocore_makes_the_rest():
    attempts = Attempts(3, sleep=lambda seconds: None)
    direct, direct_calls = failing([ErrorAnswer(503)])
    call, calls = failing([client_error(503, 'ServiceUnavailable')] * 5)
    with pytest.raises(botocore.exceptions.ClientError):
        attempts.make('SendMessage', call, direct)
    assert (len(direct_calls), len(calls)) == (1, 2)


def test_a_direct_attempt_that_sent_nothing_leaves_the_attempt_to_botocore():
    attempts = Attempts(3, sleep=lambda seconds: None)
    call, calls = failing([client_error(503, 'ServiceUnavailable')] * 5)
    with pytest.raises(botocore.exceptions.ClientError):
        attempts.make('SendMessage', call, lambda: None)
    assert len(calls) == 3


def test_a_receive_whose_answer_timed_out_is_not_made_again():
    attempts = Attempts(3, sleep=lambda seconds: None)
    for direct in (True, False):
        timeout = botocore.exceptions.ReadTimeoutError(endpoint_url=URL)
        first, first_calls = failing([timeout])
        call, calls = failing([])
        with pytest.raises(botocore.exceptions.ReadTimeoutError):
            if direct:
                attempts.make('ReceiveMessage', call, first)
            else:
                attempts.make('ReceiveMessage', first)
        assert (len(first_calls), len(calls)) == (1, 0)


def test_a_limit_of_one_makes_one_attempt():
    attempts = Attempts(1, sleep=lambda seconds: None)
    call, calls = failing([botocore.exceptions.EndpointConnectionError(endpoint_url=URL)] * 3)
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        attempts.make('GetQueueUrl', call)
    assert len(calls) == 1
