"""Settings of the chaos run's workers (and its publisher); bench/chaos.py sets the environment."""
import os

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_CHAOS_ENDPOINT', '')
QUEUE_PREFIX = os.environ.get('KALE_CHAOS_PREFIX', 'chaos-')
QUEUE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'chaos_queues.yaml')
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'chaos'
AWS_SECRET_ACCESS_KEY = 'chaos'
MESSAGE_SIGNING_KEY = 'kale-chaos-signing-key-not-for-production'

# A message that kills its worker reaches the dead-letter queue after 4 receives.
MAX_RECEIVE_COUNT = 4
# Retries come back within a few seconds, so the run stays short.
RETRY_DELAY_MULTIPLE_SEC = 1
SQS_MAX_TASK_DELAY_SEC = 2
# Outages are noticed quickly and retried often.
SQS_CONNECT_TIMEOUT_SEC = 2
SQS_ERROR_MAX_BACKOFF_SEC = 2
DIE_ON_RESIDENT_SET_SIZE_MB = 0
# Below SQS's 1 MiB, so the hostile 300 KB body is refused as too large.
SQS_TASK_SIZE_LIMIT = 256000

# Task records, when the run asks for them (--records): a SQLite file or a
# PostgreSQL database of the run's own.
RECORDS_URL = os.environ.get('KALE_CHAOS_RECORDS', '')
RECORDS_HEARTBEAT_SEC = 1
