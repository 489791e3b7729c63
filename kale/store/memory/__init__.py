"""The memory store: every facet kept in this process's memory, behind one
lock, for unit tests (a process's tasks and workers cannot share it)."""
from __future__ import annotations

import threading
from typing import Any

from kale.store.memory.flow import MemoryFlow
from kale.store.memory.outbox import MemoryOutbox
from kale.store.memory.schedules import MemorySchedules
from kale.store.memory.unique import MemoryUnique
from kale.store.memory.webhooks import MemoryWebhooks
from kale.store.memory.workflows import MemoryWorkflows


class MemoryStore:
    """A store in this process's memory; ``url`` is ``memory://NAME``."""

    def __init__(self, url: str = 'memory://'):
        self.url = url
        self.lock = threading.RLock()
        #: The task records' status by task id (read by other facets).
        self.task_status: dict[str, str] = {}
        self.schedules = MemorySchedules(self)
        self.unique = MemoryUnique(self)
        self.flow = MemoryFlow(self)
        self.webhooks = MemoryWebhooks(self)
        self.workflows = MemoryWorkflows(self)
        self.outbox = MemoryOutbox(self)

    def __repr__(self) -> str:
        return 'MemoryStore(%r)' % self.url

    def set_task_status(self, task_id: str, status: Any) -> None:
        """What the records facet will do: note a task's status."""
        with self.lock:
            self.task_status[task_id] = str(status)
