"""Settings for ElasticMQ through the original Kale's proxy settings (``ELASTICMQ_HOST``,
``ELASTICMQ_PORT``), for development only: the signing key below is public
(docs/explanation/internals-transport.md, "The presets").
"""
import os

from kale.presets import default_queue_config

MESSAGE_QUEUE_USE_PROXY = True
MESSAGE_QUEUE_PROXY_HOST = os.environ.get('ELASTICMQ_HOST', '127.0.0.1')
MESSAGE_QUEUE_PROXY_PORT = int(os.environ.get('ELASTICMQ_PORT', '9324'))
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'x'
AWS_SECRET_ACCESS_KEY = 'x'

QUEUE_CONFIG = default_queue_config()

# A development key, known to everyone who has Kale.
MESSAGE_SIGNING_KEY = 'kale-development-key-not-for-production'

# Topics: created on first use (`kale topics sync` at deploy time otherwise)
AUTO_CREATE_TOPICS = True
