"""Kale: a task worker for Amazon SQS with priority queues.

Define a :class:`kale.task.Task`, publish it with ``MyTask.publish(app_data,
*args, **kwargs)``, and run ``kale worker`` with ``KALE_SETTINGS_MODULE`` set.
"""
from typing import Any

from kale.conf import settings
from kale.version import __version__

__all__ = ['App', '__version__', 'settings']


def __getattr__(name: str) -> Any:
    # kale.App is imported on first use: importing kale stays cheap.
    if name == 'App':
        from kale.app import App
        return App
    raise AttributeError('module kale has no attribute %r' % (name,))
