"""Settings module the test suite runs under (in-process and in worker
subprocesses); the endpoint and queue prefix come from the environment so each
test can point it at its own server and queues."""
import json
import os

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_TEST_ENDPOINT', '')
QUEUE_PREFIX = os.environ.get('KALE_TEST_PREFIX', '')
QUEUE_CONFIG = os.environ.get('KALE_TEST_QUEUE_CONFIG') or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), 'queue_config.yaml')
AWS_REGION = 'us-east-1'
AWS_ACCESS_KEY_ID = 'test'
AWS_SECRET_ACCESS_KEY = 'test'
MESSAGE_SIGNING_KEY = 'kale-test-signing-key-0123456789'
RETRY_DELAY_MULTIPLE_SEC = float(os.environ.get('KALE_TEST_RETRY_DELAY', '1'))
SERIALIZER = os.environ.get('KALE_TEST_SERIALIZER', 'pickle')
MAX_RECEIVE_COUNT = int(os.environ.get('KALE_TEST_MAX_RECEIVE_COUNT', '10'))
TASK_ISOLATION = os.environ.get('KALE_TEST_TASK_ISOLATION', 'none')
PAYLOAD_BUCKET = os.environ.get('KALE_TEST_PAYLOAD_BUCKET', '')
RECORDS_URL = os.environ.get('KALE_TEST_RECORDS_URL', '')
OUTBOX_URL = os.environ.get('KALE_TEST_OUTBOX_URL', '')
RECORDS_HEARTBEAT_SEC = float(os.environ.get('KALE_TEST_HEARTBEAT', '10'))
LOG_FORMAT = os.environ.get('KALE_TEST_LOG_FORMAT', 'text')
WORKER_STUCK_GRACE_SEC = float(os.environ.get('KALE_TEST_STUCK_GRACE', '10'))
# In-process workers share the test process, which grows past any worker's
# limit over a whole run; the memory limit's tests set it themselves.
DIE_ON_RESIDENT_SET_SIZE_MB = 0
# The topic tests name their subscribers' module and let Kale set topics up.
TASK_MODULES = tuple(m for m in os.environ.get('KALE_TEST_TASK_MODULES', '').split(',') if m)
AUTO_CREATE_TOPICS = os.environ.get('KALE_TEST_AUTO_CREATE_TOPICS', '') == '1'
# The periodic-task tests: schedules as JSON, and a short lease for the
# processes that stand in for a leader dying.
SCHEDULES = json.loads(os.environ.get('KALE_TEST_SCHEDULES') or '{}')
SCHEDULER_LEASE_SEC = float(os.environ.get('KALE_TEST_SCHEDULER_LEASE_SEC', '15'))
# The concurrency-limit tests kill a worker and wait for its slot's lease.
CONCURRENCY_LEASE_SEC = float(os.environ.get('KALE_TEST_CONCURRENCY_LEASE_SEC', '60'))
