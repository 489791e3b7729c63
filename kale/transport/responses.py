"""Reading the answers of SQS's hot operations without botocore's generic parser,
and refusing those of the wrong shape: docs/explanation/internals-transport.md,
"Reading SQS's answers".
"""
from __future__ import annotations

import base64
import json
from typing import Any, Optional, Sequence

from kale import speed
from kale.exceptions import SQSError
from kale.transport import QueueCounts, ReceivedMessage

#: Operations whose successful answers are read by :func:`read_json_answer`.
OPERATIONS = ('ReceiveMessage', 'DeleteMessageBatch', 'ChangeMessageVisibilityBatch',
              'SendMessage', 'SendMessageBatch')
#: The transport's other requests, read the same way: an answer of the wrong
#: shape meets Kale's checks, not botocore's parser (an AttributeError).
QUEUE_OPERATIONS = ('GetQueueUrl', 'CreateQueue', 'GetQueueAttributes')
_EMPTY = b'{}'
#: The code of the SQSError for an answer of the wrong shape (retryable).
MALFORMED_ANSWER = 'MalformedAnswer'


def malformed(detail: str) -> SQSError:
    """The error for an answer of the wrong shape (``detail``): retryable, as after a 500."""
    return SQSError(detail, MALFORMED_ANSWER, retryable=True)


def read_json_answer(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                     operation_model: Any = None, **kwargs: Any) -> None:
    """botocore ``before-parse`` handler: a 200 JSON answer decoded here (one
    cut short: empty); an error answer botocore cannot read handed to it empty."""
    if getattr(operation_model, 'metadata', {}).get('protocol') != 'json':
        return
    body = response_dict.get('body')
    if response_dict.get('status_code') != 200:
        if not _error_shape(body):
            response_dict['body'] = b''
        return
    answer = json_answer(body)
    if answer is not None:
        customized_response_dict.update(answer)
    response_dict['body'] = _EMPTY


def json_answer(body: Optional[bytes]) -> Optional[dict[str, Any]]:
    """A successful answer's body as botocore's client gives it, or None when
    it is not JSON (cut short); JSON not an object is :func:`malformed`."""
    if not body:
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    except RecursionError:
        raise malformed('JSON nested too deeply to read') from None
    if type(answer) is not dict:
        raise malformed('the answer is %s, not an object' % _kind(answer))
    # botocore fills this in itself, and reads it back as a map.
    answer.pop('ResponseMetadata', None)
    decode_binary_values(answer)
    return answer


def _error_shape(body: Optional[bytes]) -> bool:
    """Whether botocore's parser can read an error answer's ``body`` (text not JSON is its message)."""
    if not body:
        return True
    try:
        error = json.loads(body.decode('utf-8'))
    except (UnicodeDecodeError, RecursionError):
        return False
    except ValueError:
        return True
    return type(error) is dict and all(type(error.get(key, '')) is str
                                       for key in ('__type', 'message', 'Message'))


def decode_binary_values(answer: dict[str, Any]) -> None:
    """Base64-decode the answer's binary attribute values in place (shapes: :func:`received_messages`)."""
    messages = answer.get('Messages')
    if type(messages) is not list:
        return
    for message in messages:
        named = message.get('MessageAttributes') if type(message) is dict else None
        if type(named) is not dict:
            continue
        for name, value in named.items():
            if type(value) is dict and 'BinaryValue' in value:
                try:
                    value['BinaryValue'] = base64.b64decode(value['BinaryValue'])
                except (TypeError, ValueError):
                    raise malformed('the BinaryValue of message attribute %s is not '
                                               'base64' % _shown(name)) from None


def install(client: Any) -> None:
    """Read the answers of ``client`` (Kale's SQS client) with :func:`read_json_answer`."""
    for operation in OPERATIONS + QUEUE_OPERATIONS:
        client.meta.events.register('before-parse.sqs.%s' % operation, read_json_answer,
                                    unique_id='kale-read-json-%s' % operation)


def field(answer: Any, path: Sequence[str], kind: type) -> Any:
    """``answer[path[0]][path[1]]...`` of type ``kind`` (else :func:`malformed`);
    None when a field is missing (an answer cut short)."""
    value = answer
    for depth, key in enumerate(path):
        if type(value) is not dict:
            raise malformed('%s is %s, not an object'
                                       % ('.'.join(path[:depth]) or 'the answer', _kind(value)))
        if key not in value:
            return None
        value = value[key]
    if type(value) is not kind:
        raise malformed('%s is %s, not %s' % ('.'.join(path), _kind(value), _kind(kind())))
    return value


def received_messages(answer: dict[str, Any], attribute_names: Sequence[str],
                      now_ms: float) -> list[ReceivedMessage]:
    """The messages of a ReceiveMessage answer (``now_ms``: this machine's
    epoch milliseconds at the answer). One of the wrong shape is a
    :func:`malformed` error: its messages come back after their visibility timeout."""
    wanted = None if 'All' in attribute_names else set(attribute_names)
    received = []
    for raw in _listed(answer, 'Messages'):
        # Read as if of the right shape (the checks cost a few tenths of a µs
        # a message); anything amiss is diagnosed by _message_problem.
        try:
            message_id, handle, body = raw['MessageId'], raw['ReceiptHandle'], raw['Body']
            system = raw.get('Attributes') or _NO_ATTRIBUTES
            count = system.get('ApproximateReceiveCount', '1')
            group = system.get('MessageGroupId', '')
            # Some emulators send every attribute whatever was asked: keep what was.
            named = raw.get('MessageAttributes')
            attributes = _string_values(named, wanted) if named and wanted != set() else {}
        except (KeyError, TypeError, AttributeError):
            raise malformed(_message_problem(raw, wanted)) from None
        receive_count = 1 if count == '1' else _whole(count, 1)
        if (type(message_id), type(handle), type(body), type(group), type(receive_count)) != _MESSAGE_TYPES:
            raise malformed(_message_problem(raw, wanted))
        received.append(speed.build(ReceivedMessage, {      # every field (see kale.speed)
            'message_id': message_id, 'receipt_handle': handle, 'body': body, 'attributes': attributes,
            'receive_count': receive_count, 'group_id': group,
            'since_first_receive_sec': 0.0 if receive_count == 1
            else _since_first_receive(system, now_ms)}))
    return received


_NO_ATTRIBUTES: dict[str, str] = {}
#: The types of a received message's id, handle, body, group and receive count.
_MESSAGE_TYPES = (str, str, str, str, int)


def _string_values(named: Any, wanted: Optional[set[str]]) -> dict[str, str]:
    """The StringValue of each attribute ``wanted`` (None: all); TypeError or AttributeError if amiss."""
    attributes = {name: value.get('StringValue', '') for name, value in named.items()
                  if wanted is None or name in wanted}
    ''.join(attributes.values())    # a TypeError unless each value is a string
    return attributes


def _message_problem(raw: Any, wanted: Optional[set[str]]) -> str:
    """What is wrong with a received message: the line of its :func:`malformed` error."""
    if type(raw) is not dict:
        return 'a message is %s, not an object' % _kind(raw)
    message_id = raw.get('MessageId')
    lacking = [name for name in ('MessageId', 'ReceiptHandle', 'Body') if type(raw.get(name)) is not str]
    if lacking:
        which = 'message %s' % _shown(message_id) if type(message_id) is str else 'a message'
        return '%s has no %s (as a string)' % (which, ', '.join(lacking))
    return 'message %s%s' % (_shown(message_id), _system_problem(raw)
                             or _named_problem(raw, wanted) or ' is not of its shape')


def _system_problem(raw: dict[str, Any]) -> str:
    """What is wrong with a message's SQS attributes ('' for nothing)."""
    system = raw.get('Attributes') or _NO_ATTRIBUTES
    if type(system) is not dict:
        return ': Attributes is %s, not an object' % _kind(system)
    count = system.get('ApproximateReceiveCount', '1')
    if count != '1' and _whole(count, 1) is None:
        return ': ApproximateReceiveCount is %s, not a whole number from 1' % _shown(count)
    if type(system.get('MessageGroupId', '')) is not str:
        return ': MessageGroupId is %s, not a string' % _kind(system.get('MessageGroupId'))
    return ''


def _named_problem(raw: dict[str, Any], wanted: Optional[set[str]]) -> str:
    """What is wrong with a message's attributes ``wanted`` (None: all; '' for nothing)."""
    named = raw.get('MessageAttributes')
    if named and type(named) is not dict:
        return ': MessageAttributes is %s, not an object' % _kind(named)
    for name, value in (named or {}).items():
        if (wanted is None or name in wanted) and (
                type(value) is not dict or type(value.get('StringValue', '')) is not str):
            return ': message attribute %s is not an object with a string StringValue' % (_shown(name))
    return ''


def _since_first_receive(attributes: dict[str, Any], now_ms: float) -> Optional[float]:
    """Seconds since a message's first receive; None when the endpoint did not say it as a number."""
    first = attributes.get('ApproximateFirstReceiveTimestamp')
    if type(first) is not str or not first.isdecimal() or len(first) > 18:
        return None
    return max(0.0, (now_ms - int(first)) / 1000.0)


def batch_entries(answer: dict[str, Any], sent: Sequence[int], success_field: str = ''
                  ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """({index: entry} of ``Successful``, {index: entry} of ``Failed``) of a
    batch whose entries had the ids ``str(i)`` for ``i`` in ``sent`` (one cut
    short names fewer); lists or entries not of their shape, an id not sent or
    named twice, or a success without its ``success_field`` are :func:`malformed`."""
    ids = {str(index): index for index in sent}
    found: tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]] = ({}, {})
    for key, entries in zip(('Successful', 'Failed'), found, strict=True):
        for entry in _listed(answer, key):
            try:
                index = ids[entry['Id']]
            except (KeyError, TypeError):
                raise malformed(_entry_problem(key, entry, ids)) from None
            if index in found[0] or index in found[1]:
                raise malformed('the entry with the Id %r is named twice' % str(index))
            if not (_failure_shape(entry) if key == 'Failed'
                    else not success_field or type(entry.get(success_field)) is str):
                raise malformed('the %s entry with the Id %r is not of its shape' % (key, str(index)))
            entries[index] = entry
    return found


def _listed(answer: dict[str, Any], key: str) -> list[Any]:
    """The list ``answer[key]``: empty when missing (cut short), :func:`malformed` when not a list."""
    listed = answer.get(key)
    if listed is None:
        return []
    if type(listed) is not list:
        raise malformed('%s is %s, not a list' % (key, _kind(listed)))
    return listed


def _entry_problem(key: str, entry: Any, ids: dict[str, int]) -> str:
    """What is wrong with an entry of the batch answer's list ``key`` whose Id is not read."""
    if type(entry) is not dict:
        return 'an entry of %s is %s, not an object' % (key, _kind(entry))
    return 'an entry of %s has the Id %s, not one of the %d sent' % (key, _shown(entry.get('Id')), len(ids))


def _failure_shape(entry: dict[str, Any]) -> bool:
    """Whether a Failed entry's Code and Message are strings and its SenderFault a boolean."""
    return type(entry.get('Code', '')) is str and type(entry.get('Message', '')) is str \
        and type(entry.get('SenderFault', False)) is bool


#: The counts of GetQueueAttributes, by QueueCounts field.
COUNT_ATTRIBUTES = {'visible': 'ApproximateNumberOfMessages',
                    'in_flight': 'ApproximateNumberOfMessagesNotVisible',
                    'delayed': 'ApproximateNumberOfMessagesDelayed'}


def queue_counts(attributes: Any) -> QueueCounts:
    """The counts in a GetQueueAttributes answer's ``Attributes`` (0 for one
    not given); one that is not a whole number is a :func:`malformed` error."""
    if type(attributes) is not dict:
        raise malformed('Attributes is %s, not an object' % _kind(attributes))
    counts = {}
    for field, name in COUNT_ATTRIBUTES.items():
        value = attributes.get(name, '0')
        count = _whole(value, 0)
        if count is None:
            raise malformed('%s is %s, not a whole number' % (name, _shown(value)))
        counts[field] = count
    return QueueCounts(**counts)


def _whole(value: Any, least: int) -> Optional[int]:
    """``value``, 1 to 18 decimal digits, as a number of at least ``least``; else None."""
    if type(value) is str and 0 < len(value) <= 18 and value.isdecimal():
        number = int(value)
        if number >= least:
            return number
    return None


def _kind(value: Any) -> str:
    """A value's JSON kind, for a line about it (never the value: it may be a payload)."""
    return {dict: 'an object', list: 'a list', str: 'a string', bool: 'a boolean',
            int: 'a number', float: 'a number', type(None): 'null'}.get(type(value), 'a value')


def _shown(value: Any) -> str:
    """A short id, name or number, quoted, for a line; another value by its kind."""
    if type(value) is str:
        return repr(value if len(value) <= 40 else value[:37] + '...')
    if type(value) in (int, float, bool):
        return repr(value)[:40]
    return _kind(value)
