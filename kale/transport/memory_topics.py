"""Topics in this process's memory, delivering to a
:class:`~kale.transport.memory.MemoryTransport`'s queues: the SNS side of
:mod:`kale.transport.sns` for unit tests and eager runs. A filter policy's key
names a message attribute whose value must be one of the strings listed.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Mapping, Optional, Sequence

from kale.exceptions import TopicError
from kale.transport import OutgoingMessage
from kale.transport.memory import MemoryTransport

_ARN = 'arn:aws:%s:us-east-1:000000000000:%s'


class MemoryTopics:
    """See the module docstring; the same methods as :class:`~kale.transport.sns.SNSTopics`."""

    def __init__(self, transport: MemoryTransport):
        self.transport = transport
        self._topics: dict[str, list[dict[str, Any]]] = {}
        self._policies: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)

    def create_topic(self, name: str) -> str:
        with self._lock:
            self._topics.setdefault(_ARN % ('sns', name), [])
        return _ARN % ('sns', name)

    def find_topic(self, name: str) -> Optional[str]:
        arn = _ARN % ('sns', name)
        return arn if arn in self._topics else None

    def _subs(self, arn: str) -> list[dict[str, Any]]:
        if arn not in self._topics:
            raise TopicError('topic %r does not exist' % arn, 'NotFound')
        return self._topics[arn]

    def publish(self, arn: str, body: str, attributes: Mapping[str, str]) -> str:
        for sub in list(self._subs(arn)):
            queue = sub['queue_arn'].rsplit(':', 1)[-1]
            matched = all(attributes.get(key) in values for key, values in sub['filter'].items())
            if matched and arn in self._policies.get(queue, []):
                self.transport.send(queue, OutgoingMessage(body, dict(attributes)))
        return 'sns-%d' % next(self._numbers)

    def publish_batch(self, arn: str, entries: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
        return [self.publish(arn, body, attributes) for body, attributes in entries]

    def subscriptions(self, arn: str) -> list[dict[str, Any]]:
        return [dict(sub) for sub in self._subs(arn)]

    def subscribe(self, arn: str, queue_arn: str, filter_policy: Mapping[str, Any]) -> str:
        with self._lock:
            subs = self._subs(arn)
            for sub in subs:
                if sub['queue_arn'] == queue_arn:
                    sub['filter'] = dict(filter_policy)
                    return str(sub['arn'])
            sub = {'arn': '%s:%d' % (arn, next(self._numbers)), 'queue_arn': queue_arn,
                   'filter': dict(filter_policy), 'raw': True}
            subs.append(sub)
            return str(sub['arn'])

    def unsubscribe(self, subscription: str) -> None:
        with self._lock:
            for subs in self._topics.values():
                subs[:] = [sub for sub in subs if sub['arn'] != subscription]

    def queue_arn(self, queue: str) -> str:
        if not self.transport.queue_exists(queue):
            raise TopicError('queue %r does not exist' % queue, 'QueueDoesNotExist')
        return _ARN % ('sqs', queue)

    def allow_topics(self, queue: str, topic_arns: Sequence[str]) -> None:
        with self._lock:
            self._policies[queue] = sorted(topic_arns)


def topics_of(transport: MemoryTransport) -> MemoryTopics:
    """The topics that deliver to ``transport`` (one set per transport)."""
    found = getattr(transport, '_kale_topics', None)
    if found is None:
        found = MemoryTopics(transport)
        transport._kale_topics = found          # type: ignore[attr-defined]
    return found
