"""Settings for the example worker: the embedded endpoint by default.

Run with KALE_SETTINGS_MODULE=example.taskworker.settings from the repository
root. KALE_SQS_ENDPOINT points it elsewhere (ElasticMQ, another port).
"""
import os

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_SQS_ENDPOINT', 'http://127.0.0.1:9324')
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'local'
AWS_SECRET_ACCESS_KEY = 'local'

QUEUE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'queue_config.yaml')
QUEUE_PREFIX = os.environ.get('KALE_QUEUE_PREFIX', 'example-')

# A development key, public with this file: never use it in production.
MESSAGE_SIGNING_KEY = 'kale-development-key-not-for-production'

# Retry after 1 s, 2 s, 4 s... so the example shows retries without waiting.
RETRY_DELAY_MULTIPLE_SEC = 1

# Where the example tasks record what they did (read by the demo's summary).
EXAMPLE_RESULTS_FILE = os.environ.get('KALE_EXAMPLE_RESULTS', '')

# Task records (`make demo` sets KALE_RECORDS_URL to a SQLite file of its own);
# off when the variable is not set.
RECORDS_URL = os.environ.get('KALE_RECORDS_URL', '')

# The example's task classes: subscribers of topics are found by importing
# these modules, and messages naming a task elsewhere are refused.
TASK_MODULES = ('example.taskworker',)

# Create the topics and subscribe their subscribers' queues on first use (as
# `kale topics sync` does): the embedded endpoint serves SNS too.
AUTO_CREATE_TOPICS = True

# Report each task outcome to $KALE_EXAMPLE_OUTCOMES (used by `make demo`).
WORKER_HOOKS = ['example.taskworker.hooks.OutcomeFile']
