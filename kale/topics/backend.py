"""Where topics live: SNS beside SQS, or in memory beside the in-memory
transport (tests, eager runs), found through the broker ``Task.publish``
sends with."""
from __future__ import annotations

from typing import Any, Optional

from kale.conf import settings
from kale.config import Config


def current_broker(config: Optional[Config] = None) -> Any:
    """The broker ``Task.publish`` sends through (the in-memory one in tests)."""
    from kale.broker import Broker, get_broker
    from kale.publisher import get_publisher
    sender = get_publisher().sender
    return sender if isinstance(sender, Broker) else get_broker(config or settings.config)


def topics_backend(config: Optional[Config] = None) -> Any:
    """The topics of the transport ``Task.publish`` sends to: SNS for SQS,
    in memory for the in-memory transport."""
    transport = current_broker(config).transport
    from kale.transport.memory import MemoryTransport
    if isinstance(transport, MemoryTransport):
        from kale.transport.memory_topics import topics_of
        return topics_of(transport)
    from kale.transport.sns import get_sns
    return get_sns(config or settings.config)
