"""Kale in a Django project (extra ``kale-sqs[django]``):
``INSTALLED_APPS += ['kale.contrib.django']``.

- The Django setting ``KALE`` (a dict of Kale settings) builds the default
  app: :mod:`kale.contrib.django.conf`; ``manage.py check`` checks it.
- ``manage.py kale COMMAND``: every ``kale`` command, same options.
- :func:`publish_on_commit` and :func:`publish_batch_on_commit`: publish
  when ``transaction.atomic()`` commits (:mod:`kale.contrib.django.commit`).
- :mod:`kale.contrib.django.outbox`: the outbox on Django's connection,
  its tables made by ``manage.py migrate``.
"""
from kale.contrib.django.commit import publish_batch_on_commit, publish_on_commit

__all__ = ['publish_batch_on_commit', 'publish_on_commit']
