"""Kale: a task worker for Amazon SQS with priority queues.

Define a :class:`kale.task.Task`, publish it with ``MyTask.publish(app_data,
*args, **kwargs)``, and run ``kale worker`` with ``KALE_SETTINGS_MODULE`` set.
"""
from kale.conf import settings
from kale.version import __version__

__all__ = ['__version__', 'settings']
