"""Deleting many task records in chunks of :data:`CHUNK_ROWS` rows, a
transaction each, so that the workers' writes go in between
(docs/explanation/internals-store.md, "Questions about many records")."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from sqlalchemy import select

from kale.store.sql import counters
from kale.store.sql.schema import tasks

if TYPE_CHECKING:
    from kale.store.sql.records import RecordStore

#: Rows deleted by one transaction.
CHUNK_ROWS = 1000
#: SQLite: the pause between two chunks, for a writer waiting for the lock
#: (docs/explanation/internals-store.md, "Questions about many records").
SQLITE_PAUSE_SEC = 0.1


def delete_in_chunks(store: 'RecordStore', condition: Any,
                     chunk_rows: Optional[int] = None) -> int:
    """Delete the records ``condition`` matches, a chunk at a time
    (:data:`CHUNK_ROWS` rows unless told); how many."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    deleted = 0
    while True:
        with store.begin(write=True) as conn:
            chunk = select(tasks.c.id).where(condition).limit(chunk_rows).scalar_subquery()
            gone = int(conn.execute(tasks.delete().where(tasks.c.id.in_(chunk))).rowcount or 0)
            counters.roll_up(conn)
        deleted += gone
        if gone < chunk_rows:
            break
        if store.dialect == 'sqlite':
            time.sleep(SQLITE_PAUSE_SEC)
    with store.begin(write=True) as conn:
        counters.roll_up(conn, tidy=True)
    return deleted
