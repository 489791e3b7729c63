"""The ready settings module :mod:`kale.presets.aws`, kept at its old path
(``KALE_SETTINGS_MODULE=settings.aws``) for a checkout of the repository."""
from kale.presets.aws import *  # noqa: F403
