"""Kale: a task worker for Amazon SQS with priority queues.

Define a :class:`kale.task.Task`, publish it with ``MyTask.publish(app_data,
*args, **kwargs)``, and run ``kale worker`` with ``KALE_SETTINGS_MODULE`` set.
``raise kale.Retry(after=seconds)`` in ``run_task`` retries a task after that
long (:class:`kale.exceptions.Retry`).
"""
from kale.app import App
from kale.conf import settings
from kale.exceptions import Retry
from kale.version import __version__

__all__ = ['App', 'Retry', '__version__', 'settings']
