"""Settings for real Amazon SQS, configured from the environment: ``AWS_REGION``,
``KALE_SIGNING_KEY`` (required), optionally ``KALE_QUEUE_PREFIX``, ``KALE_ENCRYPTION_KEY``
and the old keys while rotating (docs/explanation/internals-transport.md, "The presets").
"""
import os

from kale.exceptions import ImproperlyConfigured
from kale.presets import default_queue_config

AWS_REGION = os.environ.get('AWS_REGION') or os.environ.get('AWS_DEFAULT_REGION', '')
MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_SQS_ENDPOINT', '')   # e.g. a VPC endpoint
QUEUE_PREFIX = os.environ.get('KALE_QUEUE_PREFIX', '')
QUEUE_CONFIG = default_queue_config()

MESSAGE_SIGNING_KEY = os.environ.get('KALE_SIGNING_KEY', '')
if not MESSAGE_SIGNING_KEY:
    raise ImproperlyConfigured(
        'KALE_SIGNING_KEY is not set: kale.presets.aws takes the message signing key from it; '
        'make one with `python -c "import secrets; print(secrets.token_hex(32))"`')
MESSAGE_SIGNING_OLD_KEYS = tuple(key for key in os.environ.get('KALE_SIGNING_OLD_KEYS', '').split(',') if key)
MESSAGE_ENCRYPTION_KEY = os.environ.get('KALE_ENCRYPTION_KEY', '')
MESSAGE_ENCRYPTION_OLD_KEYS = tuple(
    key for key in os.environ.get('KALE_ENCRYPTION_OLD_KEYS', '').split(',') if key)

# Topics: set up at deploy time with `kale topics sync` (the IAM roles of
# workers and publishers need not create them).
AUTO_CREATE_TOPICS = False
