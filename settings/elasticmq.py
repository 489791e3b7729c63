"""Settings for ElasticMQ, e.g. `docker compose -f example/docker-compose.yml up -d`.

    export KALE_SETTINGS_MODULE=settings.elasticmq

ElasticMQ listens on 9324 like `kale sqs-local`, so settings.local works for
it too; this module shows the original Kale's proxy settings, which Kale
honours. For development only: the signing key below is public.
"""
import os

MESSAGE_QUEUE_USE_PROXY = True
MESSAGE_QUEUE_PROXY_HOST = os.environ.get('ELASTICMQ_HOST', '127.0.0.1')
MESSAGE_QUEUE_PROXY_PORT = int(os.environ.get('ELASTICMQ_PORT', '9324'))
AWS_REGION = 'elasticmq'
AWS_ACCESS_KEY_ID = 'x'
AWS_SECRET_ACCESS_KEY = 'x'

QUEUE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                            'queue_config.yaml')

# A development key, known to everyone who has this file.
MESSAGE_SIGNING_KEY = 'kale-development-key-not-for-production'
