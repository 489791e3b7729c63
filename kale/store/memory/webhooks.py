"""The webhooks' facet in memory (see :class:`kale.store.webhooks.WebhookStore`)."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale.exceptions import RecordsUnavailableError
from kale.store.webhooks import COLUMNS

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


class MemoryWebhooks:
    """Webhooks' rows by id, under the memory store's lock (copies go in and out)."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.by_id: dict[str, dict[str, Any]] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        with self.root.lock:
            if row['id'] in self.by_id:
                raise RecordsUnavailableError('memory store: webhook %s exists' % row['id'])
            self.by_id[row['id']] = {name: copy.deepcopy(row.get(name)) for name in COLUMNS}

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        with self.root.lock:
            rows = [copy.deepcopy(row) for row in self.by_id.values()
                    if (topic is None or row['topic'] == topic)
                    and (not active_only or row['active'] == 1)]
        return sorted(rows, key=lambda row: (row['created_at'], row['id']))

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        with self.root.lock:
            found = self.by_id.get(webhook_id)
            return copy.deepcopy(found) if found is not None else None

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        with self.root.lock:
            row = self.by_id.get(webhook_id)
            if row is None:
                return False
            row.update(active=1 if active else 0, mac=mac, updated_at=updated_at)
            return True

    def remove(self, webhook_id: str) -> bool:
        with self.root.lock:
            return self.by_id.pop(webhook_id, None) is not None
