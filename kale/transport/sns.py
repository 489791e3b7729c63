"""Topics on SNS over boto3, their subscriptions SQS queues with raw delivery
(docs/explanation/internals-transport.md, "The AWS modules"); botocore's
exceptions become :class:`kale.exceptions.TopicError`.
"""
from __future__ import annotations

import json
import threading
from typing import Any, ContextManager, Mapping, Optional, Sequence

from kale import config as kale_config
from kale.exceptions import TopicError
from kale.transport.endpoint import endpoint_url
from kale.transport.sqs import SQSTransport, aws_client, aws_errors, one_line

#: Entries of one PublishBatch (SNS's limit).
MAX_PUBLISH_BATCH = 10
#: The Sid of the statement Kale keeps in a subscriber queue's policy.
POLICY_SID = 'kale-topics'


class SNSTopics:
    """Topic operations over a boto3 SNS client, and the SQS side of a
    subscription (queue ARNs and policies) over the SQS transport's client."""

    def __init__(self, sqs: SQSTransport, client: Any = None, config: Optional[kale_config.Config] = None):
        self.sqs = sqs
        if client is None:
            if config is None:
                raise TypeError('SNSTopics needs a client or a configuration')
            client = aws_client('sns', endpoint_url(config), config, 'SNS client',
                                retries={'mode': 'standard', 'max_attempts': 3})
        self.client = client
        self.endpoint = self.client.meta.endpoint_url
        self._arns: dict[str, str] = {}
        self._lock = threading.Lock()

    def _errors(self, action: str, topic: str) -> ContextManager[None]:
        return aws_errors(TopicError, '%s on topic %r' % (action, topic), self.endpoint)

    # --- topics -------------------------------------------------------------------

    def create_topic(self, name: str) -> str:
        """The topic's ARN, created when missing (CreateTopic is idempotent)."""
        with self._errors('CreateTopic', name):
            arn = str(self.client.create_topic(Name=name)['TopicArn'])
        with self._lock:
            self._arns[name] = arn
        return arn

    def find_topic(self, name: str) -> Optional[str]:
        """The ARN of an existing topic (ListTopics, cached), or None."""
        if name in self._arns:
            return self._arns[name]
        found: dict[str, str] = {}
        with self._errors('ListTopics', name):
            for page in self.client.get_paginator('list_topics').paginate():
                for topic in page.get('Topics', []):
                    arn = str(topic['TopicArn'])
                    found[arn.rsplit(':', 1)[-1]] = arn
        with self._lock:
            self._arns.update(found)
        return found.get(name)

    def publish(self, arn: str, body: str, attributes: Mapping[str, str]) -> str:
        with self._errors('Publish', arn):
            answer = self.client.publish(TopicArn=arn, Message=body,
                                         MessageAttributes=_attributes(attributes))
        return str(answer.get('MessageId', ''))

    def publish_batch(self, arn: str, entries: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
        """Publish (body, attributes) entries, ten to a PublishBatch; their
        message ids. TopicError when any entry is refused (the ones before it
        were published)."""
        ids: list[str] = []
        for start in range(0, len(entries), MAX_PUBLISH_BATCH):
            chunk = entries[start:start + MAX_PUBLISH_BATCH]
            with self._errors('PublishBatch', arn):
                answer = self.client.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[
                    {'Id': str(number), 'Message': body, 'MessageAttributes': _attributes(attributes)}
                    for number, (body, attributes) in enumerate(chunk)])
            failed = answer.get('Failed') or []
            if failed:
                first = failed[0]
                raise TopicError('PublishBatch on topic %r: %d of %d events not published (%s: %s)' % (
                    arn, len(failed), len(chunk), first.get('Code', ''),
                    one_line(str(first.get('Message', '')))),
                    str(first.get('Code', '')), retryable=not first.get('SenderFault', False))
            by_id = {int(entry['Id']): str(entry['MessageId']) for entry in answer.get('Successful', [])}
            ids.extend(by_id.get(number, '') for number in range(len(chunk)))
        return ids

    # --- subscriptions --------------------------------------------------------------

    def subscriptions(self, arn: str) -> list[dict[str, Any]]:
        """The topic's SQS subscriptions: ``arn``, ``queue_arn`` and ``filter``
        (its filter policy, a dict, empty for none)."""
        found = []
        with self._errors('ListSubscriptionsByTopic', arn):
            pages = self.client.get_paginator('list_subscriptions_by_topic').paginate(TopicArn=arn)
            for page in pages:
                for sub in page.get('Subscriptions', []):
                    if sub.get('Protocol') != 'sqs' or not str(sub.get('SubscriptionArn', '')) \
                            .startswith('arn:'):
                        continue
                    attributes = self.client.get_subscription_attributes(
                        SubscriptionArn=sub['SubscriptionArn']).get('Attributes', {})
                    found.append({'arn': sub['SubscriptionArn'], 'queue_arn': sub['Endpoint'],
                                  'filter': json.loads(attributes.get('FilterPolicy') or '{}'),
                                  'raw': attributes.get('RawMessageDelivery') == 'true'})
        return found

    def subscribe(self, arn: str, queue_arn: str, filter_policy: Mapping[str, Any]) -> str:
        """Subscribe the queue with raw delivery and ``filter_policy`` (none
        when empty); an existing subscription of that queue is brought to
        these attributes. The subscription's ARN."""
        for sub in self.subscriptions(arn):
            if sub['queue_arn'] == queue_arn:
                if not sub['raw']:
                    self._set(sub['arn'], 'RawMessageDelivery', 'true')
                wanted = dict(filter_policy)
                if sub['filter'] != wanted:
                    # An empty policy cannot be set: '{}' would match nothing on some servers.
                    self._set(sub['arn'], 'FilterPolicy', json.dumps(wanted) if wanted else '')
                return str(sub['arn'])
        attributes = {'RawMessageDelivery': 'true'}
        if filter_policy:
            attributes['FilterPolicy'] = json.dumps(dict(filter_policy))
        with self._errors('Subscribe', arn):
            answer = self.client.subscribe(TopicArn=arn, Protocol='sqs', Endpoint=queue_arn,
                                           Attributes=attributes, ReturnSubscriptionArn=True)
        return str(answer['SubscriptionArn'])

    def _set(self, subscription: str, name: str, value: str) -> None:
        with self._errors('SetSubscriptionAttributes', subscription):
            self.client.set_subscription_attributes(SubscriptionArn=subscription,
                                                    AttributeName=name, AttributeValue=value)

    def unsubscribe(self, subscription: str) -> None:
        with self._errors('Unsubscribe', subscription):
            self.client.unsubscribe(SubscriptionArn=subscription)

    # --- the queues' side ---------------------------------------------------------

    def queue_arn(self, queue: str) -> str:
        return self.sqs.queue_arn(queue)

    def allow_topics(self, queue: str, topic_arns: Sequence[str]) -> None:
        """Let these topics send to the queue (Kale owns its policy: the statement ``kale-topics``)."""
        statement = {'Sid': POLICY_SID, 'Effect': 'Allow', 'Principal': {'Service': 'sns.amazonaws.com'},
                     'Action': 'sqs:SendMessage', 'Resource': self.queue_arn(queue),
                     'Condition': {'ArnEquals': {'aws:SourceArn': sorted(topic_arns)}}}
        policy = json.dumps({'Version': '2012-10-17', 'Statement': [statement]})
        self.sqs._call('SetQueueAttributes', queue, self.sqs.client.set_queue_attributes,
                       QueueUrl=self.sqs.url(queue), Attributes={'Policy': policy})


def _attributes(attributes: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {name: {'DataType': 'String', 'StringValue': value} for name, value in attributes.items()}
