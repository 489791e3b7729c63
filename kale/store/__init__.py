"""The store seam: every row Kale keeps goes through a store, by named
operations grouped in facets (one Protocol each), on a database
(:mod:`kale.store.sql`) or in memory (:mod:`kale.store.memory`). The facets
and their contract suite: docs/explanation/internals-store.md."""
from __future__ import annotations

import importlib
from typing import Any, Optional, Protocol

from kale.store.controls import ControlStore
from kale.store.flow import FlowStore
from kale.store.outbox import OutboxStore, OutboxWriter
from kale.store.records import RecordQueries, RecordsStore
from kale.store.schedules import Lease, Progress, ScheduleStore
from kale.store.unique import UniqueStore
from kale.store.webhooks import WebhookStore
from kale.store.workflows import WorkflowStore

__all__ = ['BACKENDS', 'ControlStore', 'FlowStore', 'Lease', 'OutboxStore', 'OutboxWriter', 'Progress',
           'RecordQueries', 'RecordsStore', 'ScheduleStore', 'Store', 'UniqueStore',
           'WebhookStore', 'WorkflowStore', 'open_store']


class Store(Protocol):
    """A store: its facets, and what opening and closing it takes."""

    url: str
    #: The database file it keeps (None: not a file).
    database_file: Optional[str]
    records: RecordsStore
    queries: RecordQueries
    schedules: ScheduleStore
    unique: UniqueStore
    flow: FlowStore
    webhooks: WebhookStore
    controls: ControlStore
    workflows: Any

    @property
    def sealer(self) -> Any:
        """What seals, opens and signs the records' values (kale.store.sealing)."""

    def migrate(self) -> None:
        """Bring its tables up to date (nothing to do where there are none)."""

    def dispose(self) -> None:
        """Let go of its connections."""


#: The stores by URL scheme (``module:Class``, each made with ``(url,
#: config)``); any other URL is a database's (SQLite, PostgreSQL).
BACKENDS = {'memory': 'kale.store.memory:MemoryStore'}
DATABASE = 'kale.store.sql.records:RecordStore'


def open_store(url: str, config: Any) -> Store:
    """A store on ``url`` with ``config``'s keys: a backend of BACKENDS by the
    URL's scheme, else the database store. Opened for each call: the
    records' recorder keeps one per URL and process."""
    module, name = BACKENDS.get(url.split(':', 1)[0], DATABASE).split(':')
    made: Store = getattr(importlib.import_module(module), name)(url, config)
    return made


def safe_url(url: str) -> str:
    """``url`` with any password hidden, for messages and logs (a database
    URL is read by SQLAlchemy, loaded only then: ``memory://`` needs none)."""
    if url.split(':', 1)[0] in BACKENDS:
        return url
    from kale.store.sql.urls import safe_url as database_url
    return database_url(url)
