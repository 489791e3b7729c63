"""Reading the answers of SQS's hot operations without botocore's generic parser.

botocore turns every JSON answer into Python by walking the operation's
output model, field by field. For the requests a worker and a publisher make
all the time (receive, delete, send, change visibility in batches) that walk
costs about 3.5 µs per received message, and 14 µs when the endpoint sends
each message's attributes along (some emulators do, asked or not): a tenth
to a third of what Kale itself spends on a message.

Those answers hold only strings, booleans, lists and maps, which is exactly
what :func:`json.loads` gives, so :func:`install` reads them with it: a
``before-parse`` handler decodes a successful JSON answer itself, hands the
result to botocore as the "customized" part of the response, and leaves
botocore an empty object to walk. The one binary field
(``MessageAttributes.*.BinaryValue``) is base64-decoded as botocore would.
Error answers, and answers in the older XML protocol, go through botocore's
parser as before. Nothing is checked less: botocore does not validate an
answer's fields either, and a body's integrity is the signature's job (see
:mod:`kale.codec.sign`), not SQS's MD5.
"""
from __future__ import annotations

import base64
import json
from typing import Any, Optional, Sequence

from kale import speed
from kale.transport import ReceivedMessage

#: Operations whose successful answers are read by :func:`read_json_answer`.
OPERATIONS = ('ReceiveMessage', 'DeleteMessageBatch', 'SendMessage', 'SendMessageBatch',
              'ChangeMessageVisibilityBatch')
_EMPTY = b'{}'


def read_json_answer(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                     **kwargs: Any) -> None:
    """botocore ``before-parse`` handler: decode a 200 JSON answer here."""
    body = response_dict.get('body')
    if response_dict.get('status_code') != 200:
        return
    answer = json_answer(body)
    if answer is None:
        return                  # botocore's parser says what is wrong with it
    customized_response_dict.update(answer)
    response_dict['body'] = _EMPTY


def json_answer(body: Optional[bytes]) -> Optional[dict[str, Any]]:
    """A successful answer's body as botocore's client gives it (binary
    attribute values decoded), or None when it is not a JSON object."""
    if not body or body[:1] != b'{':
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if type(answer) is not dict:
        return None
    decode_binary_values(answer)
    return answer


def decode_binary_values(answer: dict[str, Any]) -> None:
    """Base64-decode, in place, the binary attribute values of the answer's messages."""
    for message in answer.get('Messages') or ():
        for value in (message.get('MessageAttributes') or {}).values():
            if 'BinaryValue' in value:
                value['BinaryValue'] = base64.b64decode(value['BinaryValue'])


def install(client: Any) -> None:
    """Read the hot operations' answers of ``client`` (a boto3 SQS client
    built by Kale) with :func:`read_json_answer`."""
    for operation in OPERATIONS:
        client.meta.events.register('before-parse.sqs.%s' % operation, read_json_answer,
                                    unique_id='kale-read-json-%s' % operation)


def received_messages(answer: dict[str, Any], attribute_names: Sequence[str],
                      now_ms: float) -> list[ReceivedMessage]:
    """The messages of a ReceiveMessage answer, with the message attributes
    asked for (``attribute_names``; ``'All'``) and their receive bookkeeping
    (``now_ms``: this machine's epoch milliseconds at the answer)."""
    wanted = None if 'All' in attribute_names else set(attribute_names)
    received = []
    for raw in answer.get('Messages', ()):
        system = raw.get('Attributes') or _NO_ATTRIBUTES
        count = system.get('ApproximateReceiveCount', '1')
        # Some emulators send every attribute whatever was asked: keep what was.
        named = raw.get('MessageAttributes')
        received.append(speed.build(ReceivedMessage, {      # every field (see kale.speed)
            'message_id': raw['MessageId'], 'receipt_handle': raw['ReceiptHandle'],
            'body': raw['Body'],
            'attributes': {name: value.get('StringValue', '') for name, value in named.items()
                           if wanted is None or name in wanted} if named and wanted != set()
            else {},
            'receive_count': 1 if count == '1' else int(count),
            'group_id': system.get('MessageGroupId', ''),
            'since_first_receive_sec': 0.0 if count == '1'
            else _since_first_receive(system, now_ms)}))
    return received


_NO_ATTRIBUTES: dict[str, str] = {}


def _since_first_receive(attributes: dict[str, str], now_ms: float) -> Optional[float]:
    """Seconds since a message's first receive, from its SQS attributes (0 on
    its first receive; None when the endpoint did not say)."""
    if attributes.get('ApproximateReceiveCount', '1') == '1':
        return 0.0
    first = attributes.get('ApproximateFirstReceiveTimestamp')
    if not first or not first.isdigit():
        return None
    return max(0.0, (now_ms - int(first)) / 1000.0)
