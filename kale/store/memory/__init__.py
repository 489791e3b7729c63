"""The memory store: every facet kept in this process's memory, behind one
lock, for unit tests (a process's tasks and workers cannot share it)."""
from __future__ import annotations

import functools
import threading
from typing import Any, Optional

from kale.store.memory import facets
from kale.store.memory.records import MemoryQueries, MemoryRecords
from kale.store.memory.workflows import MemoryWorkflows


class MemoryStore:
    """A store in this process's memory, on ``memory://NAME``: every store
    opened on one name is the same database (its rows, and the keys of the first
    opened, which seal them), as two apps share a database file's rows."""

    #: No file: a spool of outcomes goes to the user's cache.
    database_file = None

    def __new__(cls, url: str = 'memory://', config: Optional[Any] = None) -> 'MemoryStore':
        with _opening:
            found = _databases.get(url)
            if found is None:
                found = _databases[url] = super().__new__(cls)
                found._open(url, config)
            return found

    def _open(self, url: str, config: Optional[Any]) -> None:
        self.url = url
        #: Whose keys seal and sign the task records (none: kept as given).
        self.config = config
        self.lock = threading.RLock()
        self.schedules = facets.MemorySchedules(self)
        self.unique = facets.MemoryUnique(self)
        self.flow = facets.MemoryFlow(self)
        self.webhooks = facets.MemoryWebhooks(self)
        self.controls = facets.MemoryControls(self)
        self.workflows = MemoryWorkflows(self)
        self.outbox = facets.MemoryOutbox(self)
        self.records = MemoryRecords(self)
        self.queries = MemoryQueries(self.records)

    def __repr__(self) -> str:
        return 'MemoryStore(%r)' % self.url

    def migrate(self) -> None:
        """No tables to bring up to date."""

    def dispose(self) -> None:
        """No connections to let go of."""

    @functools.cached_property
    def sealer(self) -> Any:
        """The configuration's sealer, or one that keeps rows as given."""
        if self.config is None:
            return _Plain()
        from kale.store.sealing import Sealer
        return Sealer(self.config)

    def status_of(self, task_id: str) -> Optional[str]:
        """The task's record's status (None without a record), for other facets."""
        with self.lock:
            row = self.records.tasks.get(task_id)
            return str(row['status']) if row is not None else None


#: The databases of this process, by URL (``memory://NAME``).
_databases: dict[str, MemoryStore] = {}
_opening = threading.Lock()


class _Plain:
    """Keeps rows as given: no keys to sign or seal with."""

    sealing = dropping = False

    @staticmethod
    def stored(row: dict[str, Any], published: bool = False) -> dict[str, Any]:
        return row

    @staticmethod
    def open_row(row: dict[str, Any]) -> dict[str, Any]:
        return row
