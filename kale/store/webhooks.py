"""The webhooks' facet of a store: the rows of ``kale_webhooks``, as the
webhooks module (:mod:`kale.webhooks.store`) made them; a row's columns:
docs/explanation/internals-store.md, "Webhooks"."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol

#: The columns of a webhook's row.
COLUMNS = ('id', 'topic', 'url', 'method', 'headers', 'labels', 'secret', 'mac', 'active',
           'created_at', 'updated_at')


class WebhookStore(Protocol):
    """Webhooks' rows (``store.webhooks``)."""

    def add(self, row: Mapping[str, Any]) -> None:
        """Keep a new webhook's row."""

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        """Every row (of ``topic``; only the active ones), oldest first (then by id)."""

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        """The webhook's row, None when there is none."""

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        """Enable or disable the webhook, with the row's new MAC: whether there was one."""

    def remove(self, webhook_id: str) -> bool:
        """Delete the webhook: whether there was one."""
