"""The ready settings module :mod:`kale.presets.elasticmq`, kept at its old path
(``KALE_SETTINGS_MODULE=settings.elasticmq``) for a checkout of the repository."""
from kale.presets.elasticmq import *  # noqa: F403
