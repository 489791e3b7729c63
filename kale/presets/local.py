"""Settings for the embedded endpoint, ``kale sqs-local``, at ``$KALE_SQS_ENDPOINT`` (by
default http://127.0.0.1:9324), for development only: the signing key below is public
(docs/explanation/internals-transport.md, "The presets").
"""
import os

from kale.presets import default_queue_config

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_SQS_ENDPOINT', 'http://127.0.0.1:9324')
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'local'
AWS_SECRET_ACCESS_KEY = 'local'

QUEUE_CONFIG = default_queue_config()

# A development key, known to everyone who has Kale: Kale refuses it for any
# endpoint that is not on this machine.
MESSAGE_SIGNING_KEY = 'kale-development-key-not-for-production'

# Retry quickly while developing.
RETRY_DELAY_MULTIPLE_SEC = 2

# Task records in a SQLite file in the current directory (WAL mode: several
# worker processes on this machine share it); `kale web` shows them.
# KALE_RECORDS_URL points them elsewhere; set it to '' to turn them off.
RECORDS_URL = os.environ.get('KALE_RECORDS_URL', 'sqlite:///kale-records.db')

# Topics: created on first use (`kale topics sync` at deploy time otherwise)
AUTO_CREATE_TOPICS = True
