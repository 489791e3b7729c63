"""Settings of the Django example: SQLite, and Kale on `kale sqs-local`."""
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = 'django-example-not-for-production'
DEBUG = True
ALLOWED_HOSTS = ['127.0.0.1', 'localhost']
ROOT_URLCONF = 'mysite.urls'
USE_TZ = True
DEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'
INSTALLED_APPS = [
    'django.contrib.contenttypes',
    'kale.contrib.django',          # KALE, manage.py kale, the outbox's migrations
    'orders',                       # orders/tasks.py: its tasks, found by Kale
]
DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3',
                         'NAME': os.environ.get('ORDERS_DB', BASE_DIR / 'db.sqlite3')}}

# Kale's settings: the names of a Kale settings module, in a dict.
KALE = {
    'MESSAGE_QUEUE_ENDPOINT_URL': os.environ.get('KALE_SQS_ENDPOINT', 'http://127.0.0.1:9324'),
    'AWS_REGION': 'us-east-1',
    'AWS_ACCESS_KEY_ID': 'local',
    'AWS_SECRET_ACCESS_KEY': 'local',
    'QUEUE_CONFIG': 'queue_config.yaml',        # beside this file
    # A development key: Kale refuses it for any endpoint not on this machine.
    'MESSAGE_SIGNING_KEY': 'kale-development-key-not-for-production',
    'RECORDS': 'django',                        # the task records in DATABASES['default']
}
