"""The fields of SQS requests made from Kale's messages, and how messages are
grouped into batch requests (no AWS library needed)."""
from __future__ import annotations

from typing import Any, Sequence

from kale.transport import MAX_BATCH_ENTRIES, OutgoingMessage


def message_fields(message: OutgoingMessage) -> dict[str, Any]:
    """The request fields of one message (SendMessage, or a batch entry)."""
    fields: dict[str, Any] = {'MessageBody': message.body}
    # FIFO queues (whose messages all carry a deduplication id) take no
    # per-message delay; a fair queue's message carries a group and a delay.
    if message.delay_sec or not message.dedup_id:
        fields['DelaySeconds'] = int(message.delay_sec)
    if message.attributes:
        fields['MessageAttributes'] = {
            name: {'DataType': 'Number' if isinstance(value, int) else 'String',
                   'StringValue': str(value)} for name, value in message.attributes.items()}
    if message.group_id:
        fields['MessageGroupId'] = message.group_id
    if message.dedup_id:
        fields['MessageDeduplicationId'] = message.dedup_id
    return fields


def split_batches(messages: Sequence[OutgoingMessage], byte_limit: int,
                  max_entries: int = MAX_BATCH_ENTRIES) -> list[list[int]]:
    """Message indexes in requests of ``max_entries`` and ``byte_limit`` at most (or a message alone)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index, message in enumerate(messages):
        message_size = message.size()
        if current and (len(current) == max_entries or size + message_size > byte_limit):
            groups.append(current)
            current, size = [], 0
        current.append(index)
        size += message_size
    if current:
        groups.append(current)
    return groups
