"""The Django app ``kale.contrib.django``: its ``ready`` makes the setting
``KALE`` the default app's settings and registers the check of them."""
from __future__ import annotations

from django.apps import AppConfig


class KaleConfig(AppConfig):
    name = 'kale.contrib.django'
    label = 'kale'
    verbose_name = 'Kale'
    default_auto_field = 'django.db.models.BigAutoField'

    def ready(self) -> None:
        from django.core import checks

        from kale.contrib.django.checks import check_kale_settings
        from kale.contrib.django.conf import install
        install()
        checks.register(check_kale_settings, 'kale')
