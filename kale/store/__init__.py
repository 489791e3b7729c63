"""The store seam: every row Kale keeps (task records, workers, workflows,
unique keys, the outbox, schedules, rate and concurrency limits, webhooks)
goes through a store, by named operations grouped in facets, one
:class:`typing.Protocol` each. A store on a database runs them as named SQL
statements (:mod:`kale.store.sql`, SQLite and PostgreSQL); the memory store
(:mod:`kale.store.memory`) keeps them in this process, for unit tests.

One contract suite (``tests/contract/``) runs every facet against the
memory, SQLite and PostgreSQL stores: a new backend passes it to be accepted.

The facets: :class:`~kale.store.schedules.ScheduleStore`
(``store.schedules``), :class:`~kale.store.unique.UniqueStore`
(``store.unique``), :class:`~kale.store.flow.FlowStore` (``store.flow``),
:class:`~kale.store.webhooks.WebhookStore` (``store.webhooks``),
:class:`~kale.store.workflows.WorkflowStore` (``store.workflows``) and
:class:`~kale.store.outbox.OutboxStore` (``store.outbox``: on the application's
own database, :class:`kale.store.sql.outbox.SQLOutbox`), and the task records'
:class:`~kale.store.records.RecordsStore` (``store.records``) and
:class:`~kale.store.records.RecordQueries` (``store.queries``).
"""
from __future__ import annotations

from kale.store.flow import FlowStore
from kale.store.outbox import OutboxStore, OutboxWriter
from kale.store.records import RecordQueries, RecordsStore
from kale.store.schedules import Lease, Progress, ScheduleStore
from kale.store.unique import UniqueStore
from kale.store.webhooks import WebhookStore
from kale.store.workflows import WorkflowStore

__all__ = ['FlowStore', 'Lease', 'OutboxStore', 'OutboxWriter', 'Progress', 'RecordQueries',
           'RecordsStore', 'ScheduleStore', 'UniqueStore', 'WebhookStore', 'WorkflowStore']
