"""Where an app's topics live: SNS beside SQS, or in memory beside the
in-memory transport (tests, eager runs), found through the broker the app
publishes with."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from kale.app import App
    from kale.broker import Broker


def publishing_broker(app: 'App') -> 'Broker':
    """The broker ``app``'s publisher sends with: the in-memory one a test or
    eager mode put in place (:func:`kale.publisher.set_publisher`), else its own."""
    from kale.broker import Broker
    sender = app.publisher.sender
    return sender if isinstance(sender, Broker) else app.broker


def topics_backend(app: 'App') -> Any:
    """The topics of the transport ``app`` publishes to: SNS for SQS, in
    memory for the in-memory transport."""
    transport = publishing_broker(app).transport
    from kale.transport.memory import MemoryTransport
    if isinstance(transport, MemoryTransport):
        from kale.transport.memory_topics import topics_of
        return topics_of(transport)
    from kale.transport.sns import SNSTopics
    from kale.transport.sqs import SQSTransport
    return app.part(('sns', id(transport)), lambda: SNSTopics(cast(SQSTransport, transport),
                                                              config=app.config))
