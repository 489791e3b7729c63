"""The ready settings module :mod:`kale.presets.local`, kept at its old path
(``KALE_SETTINGS_MODULE=settings.local``) for a checkout of the repository."""
from kale.presets.local import *  # noqa: F403
