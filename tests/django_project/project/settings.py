"""Settings of the test suite's Django project: the database and Kale's
endpoint and queue prefix come from the environment, so that each test
runs on its own database (SQLite or PostgreSQL) and queues.

- KALE_TEST_DJANGO_DB: a SQLite file's path, or a postgresql:// URL;
- KALE_TEST_ENDPOINT, KALE_TEST_PREFIX: as for tests/kale_test_settings.py;
- KALE_TEST_DJANGO_KALE: JSON merged over KALE (a test's bad value).
"""
import json
import os
from urllib.parse import urlsplit

SECRET_KEY = 'kale-tests-django-project'
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ['*']
ROOT_URLCONF = 'project.urls'
INSTALLED_APPS = ['django.contrib.contenttypes', 'kale.contrib.django', 'shop']
DEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'


def _database(given):
    if not given.startswith('postgresql://'):
        return {'ENGINE': 'django.db.backends.sqlite3', 'NAME': given}
    url = urlsplit(given)
    return {'ENGINE': 'django.db.backends.postgresql', 'NAME': url.path.lstrip('/'),
            'USER': url.username or '', 'PASSWORD': url.password or '',
            'HOST': url.hostname or '', 'PORT': str(url.port or '')}


DATABASES = {'default': _database(os.environ.get('KALE_TEST_DJANGO_DB', 'db.sqlite3'))}

KALE = {
    'QUEUE_CONFIG': 'queue_config.yaml',            # beside this file
    'MESSAGE_QUEUE_ENDPOINT_URL': os.environ.get('KALE_TEST_ENDPOINT', ''),
    'QUEUE_PREFIX': os.environ.get('KALE_TEST_PREFIX', ''),
    'AWS_REGION': 'us-east-1',
    'AWS_ACCESS_KEY_ID': 'test',
    'AWS_SECRET_ACCESS_KEY': 'test',
    'MESSAGE_SIGNING_KEY': 'kale-test-django-signing-key-0123',
    'RECORDS': 'django',
    'DIE_ON_RESIDENT_SET_SIZE_MB': 0,
    **json.loads(os.environ.get('KALE_TEST_DJANGO_KALE') or '{}'),
}
