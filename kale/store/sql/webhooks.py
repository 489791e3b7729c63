"""The webhooks' facet on a database (see :class:`kale.store.webhooks.WebhookStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from sqlalchemy import delete, select, update

from kale.store.sql.schema import webhooks as table

if TYPE_CHECKING:
    from kale.store.sql.records import RecordStore

_ALL = select(table).order_by(table.c.created_at, table.c.id)


class SQLWebhooks:
    """Webhooks' rows in ``kale_webhooks``."""

    def __init__(self, store: 'RecordStore'):
        self.store = store

    def add(self, row: Mapping[str, Any]) -> None:
        self.store.changed(table.insert().values(**row))

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        query = _ALL
        if topic is not None:
            query = query.where(table.c.topic == topic)
        if active_only:
            query = query.where(table.c.active == 1)
        return [dict(row._mapping) for row in self.store.read(query)]

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        found = self.store.read(select(table).where(table.c.id == webhook_id))
        return dict(found[0]._mapping) if found else None

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        return bool(self.store.changed(update(table).where(table.c.id == webhook_id).values(
            active=1 if active else 0, mac=mac, updated_at=updated_at)))

    def remove(self, webhook_id: str) -> bool:
        return bool(self.store.changed(delete(table).where(table.c.id == webhook_id)))
