"""Counting API requests for real: botocore's event hooks, or the memory transport's."""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Optional


class RequestCounter:
    """Records every request sent (time, operation), including botocore's retries."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._clients: list[Any] = []
        self._id = 'bench-request-counter-%d' % id(self)

    def attach(self, client: Any) -> 'RequestCounter':
        """Count what ``client`` (a boto3 SQS client) sends from now on."""
        client.meta.events.register('before-send.sqs', self._on_send, unique_id=self._id)
        self._clients.append(client)
        return self

    def detach(self) -> None:
        for client in self._clients:
            client.meta.events.unregister('before-send.sqs', unique_id=self._id)
        self._clients = []

    def _on_send(self, event_name: str, **kwargs: Any) -> None:
        self.record(event_name.rsplit('.', 1)[-1])

    def record(self, operation: str) -> None:
        """Count one request (the memory transport's ``on_request``)."""
        with self._lock:
            self.events.append((time.time(), operation))

    @property
    def total(self) -> int:
        return len(self.events)

    def by_operation(self) -> dict[str, int]:
        return dict(collections.Counter(operation for _, operation in self.events))

    def between(self, start: float, end: Optional[float] = None) -> int:
        """Requests sent from ``start`` to ``end`` (time.time() values)."""
        return sum(1 for at, _ in self.events if at >= start and (end is None or at <= end))
