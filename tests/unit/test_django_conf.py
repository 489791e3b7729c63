"""The Django integration's parts that need no Django project: the setting
KALE read into Kale's settings, DATABASES into SQLAlchemy URLs, the
settings given as values, ``manage.py kale``'s command line, and the
outbox tables made by the migration's SQL (end to end: tests/e2e/test_django_e2e.py)."""
import pytest
from sqlalchemy import create_engine, inspect

from kale.conf import settings
from kale.contrib.django.conf import HOOKS, database_url, kale_values
from kale.contrib.django.management.commands.kale import split_django_options
from kale.exceptions import ImproperlyConfigured
from kale.store.sql.outbox_schema import create_statements, drop_statements, init

SQLITE = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': '/srv/app/db.sqlite3'}}
POSTGRES = {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'shop', 'USER': 'web',
            'PASSWORD': 'p@ss', 'HOST': 'db.internal', 'PORT': '5433',
            'OPTIONS': {'sslmode': 'require', 'pool': True}}


def test_a_sqlite_database_is_its_file():
    assert database_url(SQLITE['default']) == 'sqlite:////srv/app/db.sqlite3'


def test_a_postgresql_database_keeps_its_credentials_port_and_libpq_options():
    assert database_url(POSTGRES) == \
        'postgresql://web:p%40ss@db.internal:5433/shop?sslmode=require'


def test_a_unix_socket_directory_is_the_host_parameter():
    given = {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'shop',
             'HOST': '/var/run/postgresql'}
    assert database_url(given) == 'postgresql:///shop?host=%2Fvar%2Frun%2Fpostgresql'


@pytest.mark.parametrize('database, said', [
    ({'ENGINE': 'django.db.backends.mysql', 'NAME': 'shop'},
     "DATABASES['default']: Kale's outbox and task records work on SQLite and PostgreSQL, "
     'not django.db.backends.mysql'),
    ({'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'},
     "DATABASES['default'] is an in-memory SQLite database"),
])
def test_a_database_kale_cannot_use_is_one_line(database, said):
    with pytest.raises(ImproperlyConfigured) as raised:
        database_url(database)
    assert str(raised.value).startswith(said)


def test_kale_gives_the_settings_and_the_outbox_is_the_default_database():
    values = kale_values({'QUEUE_PREFIX': 'shop-'}, SQLITE, ['shop.tasks'])
    assert values == {'QUEUE_PREFIX': 'shop-', 'OUTBOX_URL': 'sqlite:////srv/app/db.sqlite3',
                      'TASK_MODULES': ('shop.tasks',), 'WORKER_HOOKS': (HOOKS,)}


def test_records_django_keeps_the_records_in_the_default_database():
    values = kale_values({'RECORDS': 'django'}, {'default': POSTGRES})
    assert values['RECORDS_URL'] == values['OUTBOX_URL'] == database_url(POSTGRES)


def test_a_kale_outbox_url_and_task_modules_and_hooks_are_kept():
    values = kale_values({'OUTBOX_URL': 'sqlite:///other.db', 'TASK_MODULES': ['jobs'],
                          'WORKER_HOOKS': ['myapp.Hooks']}, SQLITE, ['shop.tasks', 'jobs'])
    assert values['OUTBOX_URL'] == 'sqlite:///other.db'
    assert values['TASK_MODULES'] == ('jobs', 'shop.tasks')
    assert values['WORKER_HOOKS'] == ('myapp.Hooks', HOOKS)


def test_an_unsupported_default_database_has_no_outbox():
    mysql = {'default': {'ENGINE': 'django.db.backends.mysql', 'NAME': 'shop'}}
    assert 'OUTBOX_URL' not in kale_values({}, mysql)


@pytest.mark.parametrize('kale, said', [
    (['QUEUE_PREFIX'], 'must be a dict of Kale settings'),
    ({'QUEUE_PREFX': 'x'}, "'QUEUE_PREFX' is not a Kale setting (did you mean QUEUE_PREFIX?)"),
    ({'SQS_TASK_SIZE_LIMIT': 'big'}, 'setting SQS_TASK_SIZE_LIMIT must be a whole number'),
    ({'RECORDS': 'sqlite'}, "RECORDS must be 'django'"),
    ({'RECORDS': 'django', 'RECORDS_URL': 'sqlite:///r.db'},
     "give RECORDS_URL or RECORDS = 'django', not both"),
])
def test_a_bad_kale_is_one_line_naming_the_key(kale, said):
    with pytest.raises(ImproperlyConfigured) as raised:
        kale_values(kale, SQLITE)
    assert said in str(raised.value) and '\n' not in str(raised.value)


def test_settings_given_as_values_are_checked_when_read_and_named_by_their_source():
    with settings.kept():
        settings.use_values(lambda: {'QUEUE_PREFIX': 'given-'}, 'the Django setting KALE')
        assert settings.QUEUE_PREFIX == 'given-' and settings.given_values
        settings.reload()                           # still the values, read again
        assert settings.config.module_name == 'the Django setting KALE'
        assert settings.QUEUE_PREFIX == 'given-'
        settings.use_values({'QUEUE_PREFIX': 5}, 'the Django setting KALE')
        with pytest.raises(ImproperlyConfigured) as raised:
            settings.load()
        assert str(raised.value) == ('the Django setting KALE: setting QUEUE_PREFIX must be a '
                                     'string, got 5')
        settings.use_module('tests.kale_test_settings', '--settings')
        assert not settings.given_values
    assert not settings.given_values


def test_djangos_own_options_are_kept_apart_from_the_kale_command_line():
    assert split_django_options(['worker', '--settings', 'site.prod', '--burst',
                                 '--pythonpath=/srv', '--queues', 'a']) == \
        (['worker', '--burst', '--queues', 'a'], ['--settings', 'site.prod', '--pythonpath=/srv'])


def test_the_migrations_sql_makes_the_tables_kale_outbox_init_finds_up_to_date(tmp_path):
    engine = create_engine('sqlite:///%s' % (tmp_path / 'app.db'))
    with engine.begin() as conn:
        for statement in create_statements('sqlite'):
            conn.exec_driver_sql(statement)
    assert init(engine) == []
    assert {'kale_outbox', 'kale_outbox_rejected', 'kale_consumed'} <= \
        set(inspect(engine).get_table_names())
    with engine.begin() as conn:
        for statement in drop_statements('sqlite'):
            conn.exec_driver_sql(statement)
    assert inspect(engine).get_table_names() == []
