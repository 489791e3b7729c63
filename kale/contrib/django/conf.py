"""Kale's settings from Django's: the setting ``KALE`` (a dict of Kale
settings) builds the default app, with the records, the outbox, the apps'
``tasks`` modules and the connection hooks of the project. See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Mapping
from typing import Any, Optional, Sequence

from kale.config import ENVIRONMENT_VARIABLE, SETTING_NAMES, check_settings
from kale.exceptions import ImproperlyConfigured

#: What errors about these settings name.
SOURCE = 'the Django setting KALE'
#: ``KALE['RECORDS']``: where the records go, when not at ``RECORDS_URL``.
RECORDS = 'RECORDS'
#: The hooks every worker of a Django project runs.
HOOKS = 'kale.contrib.django.hooks.DjangoHooks'

_SQLITE = 'django.db.backends.sqlite3'
_POSTGRESQL = ('django.db.backends.postgresql', 'django.db.backends.postgresql_psycopg2')
#: Django's PostgreSQL OPTIONS that libpq also takes in a URL.
_PG_OPTIONS = ('sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'application_name',
               'connect_timeout', 'target_session_attrs', 'options')


def database_url(database: Mapping[str, Any], alias: str = 'default') -> str:
    """The SQLAlchemy URL of Django database ``alias`` (its entry in
    ``DATABASES``): a SQLite file or a PostgreSQL database."""
    engine = database.get('ENGINE', '')
    if engine == _SQLITE:
        return _sqlite_url(str(database.get('NAME') or ''), alias)
    if engine in _POSTGRESQL:
        return _postgresql_url(database)
    raise ImproperlyConfigured("DATABASES[%r]: Kale's outbox and task records work on SQLite "
                               'and PostgreSQL, not %s' % (alias, engine or 'no ENGINE'))


def _sqlite_url(name: str, alias: str) -> str:
    if not name or name == ':memory:' or 'mode=memory' in name:
        raise ImproperlyConfigured("DATABASES[%r] is an in-memory SQLite database, which "
                                   "Kale's processes cannot open: give it a file" % alias)
    return 'sqlite:///' + os.path.abspath(name)


def _postgresql_url(database: Mapping[str, Any]) -> str:
    from kale.store.sql.urls import postgresql_url
    host, query = _postgresql_host(database)
    port = str(database.get('PORT') or '')
    user, password, name = (database.get(key) or None for key in ('USER', 'PASSWORD', 'NAME'))
    return postgresql_url(user, password, host, int(port) if port.isdigit() else None, name,
                          query)


def _postgresql_host(database: Mapping[str, Any]) -> tuple[Optional[str], dict[str, str]]:
    """The host of the URL, and its query: the OPTIONS libpq takes, and a
    Unix socket's directory."""
    options = database.get('OPTIONS') or {}
    query = {key: str(options[key]) for key in _PG_OPTIONS if key in options}
    host = str(database.get('HOST') or '')
    if host.startswith('/'):
        query['host'], host = host, ''
    return host or None, query


def supported(database: Mapping[str, Any]) -> bool:
    """Whether Kale can use this ``DATABASES`` entry (a SQLite file or PostgreSQL)."""
    try:
        database_url(database)
    except ImproperlyConfigured:
        return False
    return True


def kale_values(kale: Any, databases: Mapping[str, Any],
                tasks_modules: Sequence[str] = ()) -> dict[str, Any]:
    """The Kale settings ``KALE`` gives, checked, with what the module
    docstring adds (``tasks_modules``: the apps' ``tasks`` modules).
    ImproperlyConfigured names the bad key."""
    kale = {} if kale is None else kale
    values = _settings_of(kale)
    default = databases.get('default') or {}
    if RECORDS in kale:
        values['RECORDS_URL'] = _records_url(kale[RECORDS], values, default)
    if 'OUTBOX_URL' not in values and supported(default):
        values['OUTBOX_URL'] = database_url(default)
    modules = _merged(values.get('TASK_MODULES') or (), tasks_modules)
    if modules:
        values['TASK_MODULES'] = modules
    values['WORKER_HOOKS'] = tuple(values.get('WORKER_HOOKS') or ()) + (HOOKS,)
    return values


def _settings_of(kale: Any) -> dict[str, Any]:
    """The Kale settings of ``KALE`` (its ``RECORDS`` aside), checked."""
    if not isinstance(kale, Mapping):
        raise ImproperlyConfigured('must be a dict of Kale settings, e.g. {"QUEUE_CONFIG": '
                                   '"queue_config.yaml"}, got %s' % type(kale).__name__)
    for key in kale:
        if key != RECORDS and key not in SETTING_NAMES:
            close = difflib.get_close_matches(str(key), sorted(SETTING_NAMES) + [RECORDS], n=1,
                                              cutoff=0.8)
            raise ImproperlyConfigured('%r is not a Kale setting%s' % (
                key, ' (did you mean %s?)' % close[0] if close else ''))
    values = {key: value for key, value in kale.items() if key != RECORDS}
    check_settings(values)
    return values


def _merged(modules: Sequence[str], more: Sequence[str]) -> tuple[str, ...]:
    return tuple(modules) + tuple(name for name in more if name not in modules)


def _records_url(records: Any, values: Mapping[str, Any], default: Mapping[str, Any]) -> str:
    """``RECORDS_URL`` for ``KALE['RECORDS']``."""
    if records != 'django':
        raise ImproperlyConfigured("RECORDS must be 'django' (the task records in "
                                   "DATABASES['default']), got %r" % (records,))
    if values.get('RECORDS_URL'):
        raise ImproperlyConfigured("give RECORDS_URL or RECORDS = 'django', not both")
    return database_url(default)


def apps_tasks_modules() -> list[str]:
    """The ``tasks`` module of each installed app that has one."""
    from django.apps import apps
    return [app.name + '.tasks' for app in apps.get_app_configs()
            if app.name != 'kale.contrib.django' and _spec(app.name + '.tasks') is not None]


def _spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except ImportError:
        return None


def given() -> Optional[dict[str, Any]]:
    """The Kale settings of this Django project (checked; ImproperlyConfigured
    names a bad key); None when it has no ``KALE`` and
    ``KALE_SETTINGS_MODULE`` names a Kale settings module, which then stays
    in use."""
    from django.conf import settings
    if _module_in_use():
        return None
    return kale_values(getattr(settings, 'KALE', None), settings.DATABASES, apps_tasks_modules())


def _module_in_use() -> bool:
    """No ``KALE``, and ``KALE_SETTINGS_MODULE`` names a Kale settings module."""
    from django.conf import settings
    return getattr(settings, 'KALE', None) is None \
        and bool(os.environ.get(ENVIRONMENT_VARIABLE, '').strip())


def settings_dir() -> Optional[str]:
    """The directory of Django's settings module, where a relative
    QUEUE_CONFIG is also looked for."""
    from django.conf import settings
    module = os.environ.get('DJANGO_SETTINGS_MODULE') or getattr(settings, 'SETTINGS_MODULE', '')
    spec = _spec(module) if module else None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def install() -> None:
    """Make ``KALE`` the default app's settings (read when Kale first needs
    them: a bad value is said then, or by ``manage.py check``)."""
    from kale.conf import settings
    if not _module_in_use():
        settings.use_values(lambda: given() or {}, SOURCE, settings_dir())
