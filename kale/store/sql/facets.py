"""The facets of a store on a database, each made (and its module
imported) when first used: ``store.schedules``, ``store.unique``,
``store.flow``, ``store.webhooks``, ``store.workflows``, ``store.controls``, and the task
records' ``store.records`` (the store itself) and ``store.queries``."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from kale.store.controls import ControlStore
    from kale.store.flow import FlowStore
    from kale.store.records import RecordQueries, RecordsStore
    from kale.store.schedules import ScheduleStore
    from kale.store.sql.records import RecordStore
    from kale.store.unique import UniqueStore
    from kale.store.webhooks import WebhookStore
    from kale.store.workflows import WorkflowStore

T = TypeVar('T')


class _Facet(Generic[T]):
    """A facet made on first use from ``kale.store.sql.<module>.<name>(store)``, then kept."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, store: Any, owner: type) -> T:
        made: T = getattr(importlib.import_module('kale.store.sql.' + self.module), self.name)(store)
        store.__dict__[self.attribute] = made
        return made


class OnStore:
    """A facet that runs its statements through its database store."""

    def __init__(self, store: 'RecordStore'):
        self.store = store


class Facets:
    """What a store on a database (:class:`kale.store.sql.records.RecordStore`)
    gives of each facet (see :mod:`kale.store`)."""

    queries: _Facet[RecordQueries] = _Facet('queries', 'Queries')
    schedules: _Facet[ScheduleStore] = _Facet('schedules', 'SQLSchedules')
    unique: _Facet[UniqueStore] = _Facet('tables', 'SQLUnique')
    flow: _Facet[FlowStore] = _Facet('flow', 'SQLFlow')
    workflows: _Facet[WorkflowStore] = _Facet('workflows', 'SQLWorkflows')
    webhooks: _Facet[WebhookStore] = _Facet('tables', 'SQLWebhooks')
    controls: _Facet[ControlStore] = _Facet('tables', 'SQLControls')

    @property
    def records(self) -> 'RecordsStore':
        """The task records' facet (:mod:`kale.store.records`): the store itself."""
        return self  # type: ignore[return-value]
