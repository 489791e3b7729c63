"""The controls' facet on a database (see :class:`kale.store.controls.ControlStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sqlalchemy import and_, delete, or_, select

from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.sql.driver import insert_for
from kale.store.sql.schema import controls as table

if TYPE_CHECKING:
    from kale.store.sql.records import RecordStore


class SQLControls(ControlRows):
    """Rows of ``kale_controls``: (kind, name) -> requested_at."""

    def __init__(self, store: 'RecordStore'):
        self.store = store

    def _add(self, kind: str, name: str, now: float) -> float:
        with self.store.begin(write=True) as conn:
            insert = insert_for(conn.dialect.name)
            conn.execute(insert(table).values(kind=kind, name=name, requested_at=now)
                         .on_conflict_do_nothing(index_elements=[table.c.kind, table.c.name]))
            return float(conn.execute(select(table.c.requested_at).where(
                table.c.kind == kind, table.c.name == name)).scalar_one())

    def _of(self, kind: str) -> dict[str, float]:
        return {name: at for name, at in self.store.read(
            select(table.c.name, table.c.requested_at).where(table.c.kind == kind))}

    def _remove(self, kind: str, name: str) -> bool:
        return bool(self.store.changed(delete(table).where(
            table.c.kind == kind, table.c.name == name)))

    def read(self, worker_id: str) -> tuple[Optional[float], list[str]]:
        stop_at, paused = None, []
        with self.store.begin() as conn:
            for kind, name, at in conn.execute(select(
                    table.c.kind, table.c.name, table.c.requested_at).where(or_(
                    table.c.kind == PAUSE, and_(table.c.kind == STOP,
                                                table.c.name == worker_id)))):
                if kind == STOP:
                    stop_at = float(at)
                else:
                    paused.append(name)
        return stop_at, sorted(paused)
