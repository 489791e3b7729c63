"""Kale in a Django project (extra ``kale-sqs[django]``):
``INSTALLED_APPS += ['kale.contrib.django']``. See docs/explanation/internals-cli.md.
"""
from kale.contrib.django.commit import publish_batch_on_commit, publish_on_commit

__all__ = ['publish_batch_on_commit', 'publish_on_commit']
