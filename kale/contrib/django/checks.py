"""``manage.py check`` on the Django setting ``KALE``: each value checked
as a settings module's is, and the queue config it names read, so that a
bad one fails the check in one line naming the key, before any worker or
publisher meets it."""
from __future__ import annotations

from typing import Any

from kale.exceptions import KaleError


def check_kale_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """The system check (registered by the app's ``ready``): ``kale.E001``
    for a bad ``KALE``."""
    from django.core.checks import Error

    from kale.config import Config
    from kale.contrib.django.conf import SOURCE, given, settings_dir
    from kale.queue_config import build_queue_config
    try:
        values = given()
        if values is not None:
            build_queue_config(Config.from_values(values, module_dir=settings_dir()))
    except KaleError as exc:
        return [Error('%s: %s' % (SOURCE, str(exc).splitlines()[0]), id='kale.E001')]
    return []
