"""The facets of a store on a database, each made (and its module
imported) when first used: ``store.schedules``, ``store.unique``,
``store.flow``, ``store.webhooks``, ``store.workflows``, ``store.controls``, and the task
records' ``store.records`` (the store itself) and ``store.queries``."""
from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kale.store.controls import ControlStore
    from kale.store.flow import FlowStore
    from kale.store.records import RecordQueries, RecordsStore
    from kale.store.schedules import ScheduleStore
    from kale.store.unique import UniqueStore
    from kale.store.webhooks import WebhookStore
    from kale.store.workflows import WorkflowStore


def _made(module: str, name: str, store: Any) -> Any:
    return getattr(importlib.import_module('kale.store.sql.' + module), name)(store)


class Facets:
    """What a store on a database (:class:`kale.store.sql.records.RecordStore`)
    gives of each facet."""

    @property
    def records(self) -> 'RecordsStore':
        """The task records' facet (:mod:`kale.store.records`): the store itself."""
        return self  # type: ignore[return-value]

    @functools.cached_property
    def queries(self) -> 'RecordQueries':
        """Questions about many records (:class:`kale.store.sql.queries.Queries`)."""
        return _made('queries', 'Queries', self)

    @functools.cached_property
    def schedules(self) -> 'ScheduleStore':
        """The schedules' facet (:mod:`kale.store.schedules`)."""
        return _made('schedules', 'SQLSchedules', self)

    @functools.cached_property
    def unique(self) -> 'UniqueStore':
        """The unique keys' facet (:mod:`kale.store.unique`)."""
        return _made('unique', 'SQLUnique', self)

    @functools.cached_property
    def flow(self) -> 'FlowStore':
        """The flow-control facet (:mod:`kale.store.flow`)."""
        return _made('flow', 'SQLFlow', self)

    @functools.cached_property
    def workflows(self) -> 'WorkflowStore':
        """The workflows' facet (:mod:`kale.store.workflows`)."""
        return _made('workflows', 'SQLWorkflows', self)

    @functools.cached_property
    def webhooks(self) -> 'WebhookStore':
        """The webhooks' facet (:mod:`kale.store.webhooks`)."""
        return _made('webhooks', 'SQLWebhooks', self)

    @functools.cached_property
    def controls(self) -> 'ControlStore':
        """Paused queues and stops asked of workers (:mod:`kale.store.controls`)."""
        return _made('controls', 'SQLControls', self)
