"""Kale: a task worker for Amazon SQS with priority queues.

Define a :class:`kale.task.Task`, publish it with ``MyTask.publish(app_data,
*args, **kwargs)``, and run ``kale worker`` with ``KALE_SETTINGS_MODULE`` set.
``raise kale.Retry(after=seconds)`` in ``run_task`` retries a task after that
long (:class:`kale.retry.Retry`).
"""
from typing import TYPE_CHECKING, Any

from kale.conf import settings
from kale.version import __version__

if TYPE_CHECKING:
    from kale.retry import Retry

__all__ = ['App', 'Retry', '__version__', 'settings']


def __getattr__(name: str) -> Any:
    # kale.App and kale.Retry are imported on first use: importing kale stays cheap.
    if name == 'App':
        from kale.app import App
        return App
    if name == 'Retry':
        from kale.retry import Retry
        return Retry
    raise AttributeError('module kale has no attribute %r' % (name,))
