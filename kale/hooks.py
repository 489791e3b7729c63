"""Worker hooks: documented no-op methods, overridden by subclasses.

Subclass :class:`WorkerHooks`, override what you need, and pass instances
to ``Worker(hooks=[...])`` or name the classes in the ``WORKER_HOOKS``
setting. Hooks run in the worker process, in order; one that raises is
logged and the others still run, so a broken metrics hook cannot stop work.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from kale.batch import Batch, Settlement
    from kale.queue_config import TaskQueue

logger = logging.getLogger(__name__)


class WorkerHooks:
    """Every hook a worker calls. All do nothing here."""

    def on_worker_startup(self, worker: Any) -> None:
        """Once, before the first selection."""

    def on_worker_shutdown(self, worker: Any) -> None:
        """Once, after the last batch was settled (also on signals and memory exits)."""

    def before_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """After a batch was received, before its first task runs."""

    def after_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """After a batch was settled; ``batch.settlements`` says what happened."""

    def on_task_succeeded(self, settlement: 'Settlement') -> None:
        """A task ran to completion (also when ``should_run_task`` skipped it)."""

    def on_task_failed(self, settlement: 'Settlement') -> None:
        """A run raised or timed out and will be retried."""

    def on_task_deferred(self, settlement: 'Settlement') -> None:
        """A message was released unstarted (budget, shutdown or memory limit)."""

    def on_task_permanently_failed(self, settlement: 'Settlement') -> None:
        """A message went to the dead-letter queue (or was dropped when that is off):
        retries exhausted, a non-retriable error, or a message that cannot be decoded."""


HOOK_NAMES = [name for name in vars(WorkerHooks) if name.startswith(('on_', 'before_', 'after_'))]


class HookDispatcher:
    """Calls one hook on every registered object, isolating failures."""

    def __init__(self, hooks: Sequence[WorkerHooks]):
        self.hooks = list(hooks)

    def __call__(self, name: str, *args: Any) -> None:
        if name not in HOOK_NAMES:
            raise ValueError('no worker hook %r' % name)
        for hook in self.hooks:
            try:
                getattr(hook, name)(*args)
            except Exception:
                logger.exception('worker hook %s.%s failed', type(hook).__name__, name)
