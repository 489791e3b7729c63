"""Events with subscribers: SNS topics fanned out to SQS queues.

``topics.publish('orders', event)`` publishes once; every task class with
``subscribes = ('orders',)`` gets its own copy on its own queue, with its own
retries, dead letters, records and metrics. See docs/how-to/events-and-webhooks.md.
"""
from kale.topics.publish import publish, publish_batch

__all__ = ['publish', 'publish_batch']
