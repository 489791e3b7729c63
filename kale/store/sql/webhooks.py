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
        with self.store.begin(write=True) as conn:
            conn.execute(table.insert().values(**row))

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        query = _ALL
        if topic is not None:
            query = query.where(table.c.topic == topic)
        if active_only:
            query = query.where(table.c.active == 1)
        with self.store.begin() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        with self.store.begin() as conn:
            found = conn.execute(select(table).where(table.c.id == webhook_id)).mappings().first()
        return dict(found) if found is not None else None

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        with self.store.begin(write=True) as conn:
            return bool(conn.execute(update(table).where(table.c.id == webhook_id).values(
                active=1 if active else 0, mac=mac, updated_at=updated_at)).rowcount)

    def remove(self, webhook_id: str) -> bool:
        with self.store.begin(write=True) as conn:
            return bool(conn.execute(delete(table).where(table.c.id == webhook_id)).rowcount)
