"""Settings for the benchmark's workers; the benchmark sets the environment."""
import os

MESSAGE_QUEUE_ENDPOINT_URL = os.environ.get('KALE_BENCH_ENDPOINT', '')
AWS_REGION = os.environ.get('KALE_BENCH_REGION', 'us-east-1')
AWS_ACCESS_KEY_ID = os.environ.get('KALE_BENCH_ACCESS_KEY', '')
AWS_SECRET_ACCESS_KEY = os.environ.get('KALE_BENCH_SECRET_KEY', '')
QUEUE_PREFIX = os.environ.get('KALE_BENCH_PREFIX', 'bench-')
QUEUE_CONFIG = os.environ.get('KALE_BENCH_QUEUE_CONFIG', '')
MESSAGE_SIGNING_KEY = 'kale-bench-signing-key-not-for-production'
WORKER_HOOKS = ['bench.hooks.BenchHooks']
DIE_ON_RESIDENT_SET_SIZE_MB = 0
# Off unless a run of the records comparison turns them on (bench/records.py).
RECORDS_URL = os.environ.get('KALE_BENCH_RECORDS_URL', '')
# The store of flow control's buckets and leases (bench/flow.py).
RATE_LIMIT_URL = os.environ.get('KALE_BENCH_RATE_LIMIT_URL', '')
