"""Settings for the embedded endpoint: `kale sqs-local` on 127.0.0.1:9324.

    kale sqs-local &
    export KALE_SETTINGS_MODULE=settings.local

For development only: the signing key below is public.
"""
import os

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_SQS_ENDPOINT', 'http://127.0.0.1:9324')
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'local'
AWS_SECRET_ACCESS_KEY = 'local'

QUEUE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                            'queue_config.yaml')

# A development key, known to everyone who has this file: never use it with
# a queue that anyone else can write to.
MESSAGE_SIGNING_KEY = 'kale-development-key-not-for-production'

# Retry quickly while developing.
RETRY_DELAY_MULTIPLE_SEC = 2
