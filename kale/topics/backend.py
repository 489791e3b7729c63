"""Where topics live: SNS beside SQS, or in memory beside the in-memory
transport (tests, eager runs), found through the broker ``Task.publish``
sends with."""
from __future__ import annotations

from typing import Any

from kale.config import Config, default_config


def current_broker(config: Config) -> Any:
    """The broker ``config``'s app publishes through: the in-memory one in
    tests and eager runs."""
    from kale.broker import Broker, get_broker
    from kale.publisher import get_publisher
    if config is default_config():      # the default app's publisher may be set (tests)
        sender = get_publisher().sender
        if isinstance(sender, Broker):
            return sender
    return get_broker(config)


def topics_backend(config: Config) -> Any:
    """The topics of the transport ``Task.publish`` sends to: SNS for SQS,
    in memory for the in-memory transport."""
    transport = current_broker(config).transport
    from kale.transport.memory import MemoryTransport
    if isinstance(transport, MemoryTransport):
        from kale.transport.memory_topics import topics_of
        return topics_of(transport)
    from kale.transport.sns import get_sns
    return get_sns(config)
