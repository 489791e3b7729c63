"""The worker hooks of a Django project: Django's database connections that
went stale (past ``CONN_MAX_AGE``, or broken) are closed before and after
each task, as Django does around each request, so a long-running worker
never runs a task on a connection the database has dropped."""
from __future__ import annotations

from typing import Any

from kale.hooks import WorkerHooks


class DjangoHooks(WorkerHooks):
    """Added to every Django project's ``WORKER_HOOKS``."""

    def on_task_started(self, queue: Any, received: Any, message: Any) -> None:
        from django.db import close_old_connections
        close_old_connections()

    def on_task_finished(self, settlement: Any) -> None:
        from django.db import close_old_connections
        close_old_connections()
