"""Every Kale setting and its default.

A settings module named by the ``KALE_SETTINGS_MODULE`` environment variable
overrides any of these by defining the same UPPER_CASE name. Settings are read
the first time Kale needs one (not when Kale is imported), so the variable may
be set by the application at any point before it publishes or works.
"""
import pickle

# --- Where SQS is ---------------------------------------------------------

# Full URL of an SQS-compatible endpoint, e.g. 'http://127.0.0.1:9324' for
# `kale sqs-local` or ElasticMQ, or a VPC endpoint. Empty: AWS's public
# endpoint for AWS_REGION.
MESSAGE_QUEUE_ENDPOINT_URL = ''

# The original Kale's way to reach an emulator: when MESSAGE_QUEUE_USE_PROXY
# is true and MESSAGE_QUEUE_ENDPOINT_URL is empty, requests go to
# http://MESSAGE_QUEUE_PROXY_HOST:MESSAGE_QUEUE_PROXY_PORT.
MESSAGE_QUEUE_USE_PROXY = False
MESSAGE_QUEUE_PROXY_HOST = '127.0.0.1'
MESSAGE_QUEUE_PROXY_PORT = 9324

# Credentials and region. Empty values leave them to boto3's default chain
# (environment, ~/.aws, instance or task role). With a custom endpoint and no
# region anywhere, 'us-east-1' is used.
AWS_REGION = ''
AWS_ACCESS_KEY_ID = ''
AWS_SECRET_ACCESS_KEY = ''
AWS_SESSION_TOKEN = ''

# Seconds to wait for a TCP connection to the endpoint before treating it as
# unreachable, and for a response beyond the request's own long poll: the
# client waits SQS_READ_TIMEOUT_SEC + 20 s (the longest long poll) for any
# answer, so a receive that long-polls for 20 s is never cut short.
SQS_CONNECT_TIMEOUT_SEC = 5
SQS_READ_TIMEOUT_SEC = 10

# --- Queues ---------------------------------------------------------------

# Path of the queue configuration (YAML). A relative path is looked up from
# the current directory first, then from the settings module's directory.
QUEUE_CONFIG = 'queue_config.yaml'

# Prepended to every SQS queue name (queues and their dead-letter queues), so
# that several environments or test runs can share one AWS account.
QUEUE_PREFIX = ''

# Class each queue-config entry becomes (dotted path); a subclass of
# kale.queue_config.TaskQueue may add fields of its own.
QUEUE_CLASS = 'kale.queue_config.TaskQueue'

# Dotted path of the queue selection algorithm (see kale.queue_selector).
QUEUE_SELECTOR = 'kale.queue_selector.ReducedLottery'

# Create a queue and its dead-letter queue the first time Kale uses it and
# finds it missing. Turn off where queues are managed elsewhere (Terraform,
# CloudFormation) and the worker's IAM role may not create them.
CREATE_MISSING_QUEUES = True

# Create SNS topics, their SQS subscriptions and the queue policies that let
# them deliver on first use (publishers when they publish, workers when they
# start), as `kale topics sync` does. On in the local and ElasticMQ presets;
# off for AWS, where topics are set up at deploy time.
AUTO_CREATE_TOPICS = False

# Send permanently failed and undecodable messages to 'dlq-<queue name>'.
# When False they are logged and deleted.
ENABLE_DEAD_LETTER_QUEUE = True

# Receives after which SQS itself moves a message to the dead-letter queue
# (the queue's redrive policy): the backstop for a message that kills the
# worker on every attempt, before Kale can settle it.
MAX_RECEIVE_COUNT = 10

# --- Messages -------------------------------------------------------------

# Secret used to sign every message body with HMAC-SHA256. Workers refuse
# (dead-letter, never deserialize) any body not signed with it or with one of
# MESSAGE_SIGNING_OLD_KEYS. Make one with:
#   python -c "import secrets; print(secrets.token_hex(32))"
# and give the same key to every publisher and worker.
MESSAGE_SIGNING_KEY = ''

# Keys that still verify but no longer sign: put the previous key here while
# rotating, and remove it once no message signed with it can remain.
MESSAGE_SIGNING_OLD_KEYS = ()

# The replay window: a worker dead-letters (reason 'expired'), unrun, any
# message first published longer ago than this. The default is the longest an
# honest message can wait: SQS's 14-day retention plus its 15-minute delay.
MESSAGE_MAX_AGE_SEC = 14 * 24 * 3600 + 15 * 60

# Serializers a worker accepts; a body in any other is dead-lettered (reason
# 'serializer_not_accepted') before it is decoded. Empty: just SERIALIZER,
# so a worker set to 'json' never unpickles.
ACCEPT_SERIALIZERS = ()

# Accept bodies of the earlier 'kale1' format (no publish time, no queue), only
# to drain queues during an upgrade; off, they are dead-lettered.
ACCEPT_LEGACY_MESSAGES = False

# Encrypt every body with AES-256-GCM under a key derived (HKDF-SHA256) from
# this secret of at least 32 characters, so nobody who can read a queue can
# read task arguments. Empty: bodies are signed but not encrypted. Needs the
# 'cryptography' package. Make one with:
#   python -c "import secrets; print(secrets.token_hex(32))"
MESSAGE_ENCRYPTION_KEY = ''

# Secrets that still decrypt but no longer encrypt (rotation: the new secret
# in MESSAGE_ENCRYPTION_KEY, the previous one here until the queues drained).
MESSAGE_ENCRYPTION_OLD_KEYS = ()

# Largest payload, in bytes, a body may decompress to; a worker refuses bigger
# ones, and publishing refuses a task whose payload is bigger.
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024

# Module prefixes task paths must start with, e.g. ('myapp.tasks',): a
# message naming a task outside them is dead-lettered ('unknown_task') and
# its module is never imported. Empty: any importable Task class.
TASK_MODULES = ()

# 'pickle' (any picklable arguments, the original Kale's format) or 'json'
# (arguments limited to JSON types; bodies readable by other languages).
SERIALIZER = 'pickle'

# Pickle protocol used when SERIALIZER is 'pickle'.
PICKLE_PROTOCOL = pickle.DEFAULT_PROTOCOL

# Bodies at least this long (bytes) are compressed with zlib when that makes
# them smaller.
COMPRESSION_MIN_BYTES = 512

# Largest message, body and attributes, in bytes, that Kale publishes (and a
# worker accepts): SQS's limit since 2025 is 1 MiB. Lower it for an endpoint
# that still applies the older 256 KiB limit (ElasticMQ, for one). Bigger
# payloads can go through S3 (PAYLOAD_BUCKET).
SQS_TASK_SIZE_LIMIT = 1048576

# Largest total size of one SendMessageBatch request, in bytes: SQS allows
# 1 MiB for the whole request, its ten messages together.
SQS_BATCH_REQUEST_LIMIT = 1048576

# An S3 bucket for payloads too big for an SQS message: such a payload
# (compressed and encrypted as usual) is stored as an object under
# kale-payloads/ and the message carries a signed pointer to it (bucket, key,
# size, SHA-256). The object is deleted once its task succeeded or was
# skipped; dead letters keep theirs. Give the bucket a lifecycle rule that
# expires kale-payloads/ (see the README). Empty: every payload stays in its
# message, and a bigger one is refused at publish (MessageTooLargeError);
# workers read messages that point at a bucket either way. S3 is reached with
# the AWS_* settings, and through MESSAGE_QUEUE_ENDPOINT_URL when that is on
# this machine (`kale sqs-local` serves S3 too).
PAYLOAD_BUCKET = ''

# Messages larger than this many bytes (body and attributes) keep their
# payload in PAYLOAD_BUCKET: by default SQS's limit, the default
# SQS_TASK_SIZE_LIMIT (a lower SQS_TASK_SIZE_LIMIT lowers it too). Lower it
# to keep SQS messages small.
PAYLOAD_OFFLOAD_BYTES = 1048576

# Remaps task paths found in messages, {'old.module.Task': 'new.module.Task'},
# so tasks can move between modules while old messages are still queued.
TASK_MAPPER = {}  # type: dict[str, str]

# Publishing checks that a task's arguments bind to its run_task signature,
# so a call that would fail in every worker is refused at once (PublishError).
# A task can turn this off with `check_arguments = False`.
CHECK_TASK_ARGUMENTS = True

# Publish hooks (kale.hooks.PublishHooks subclasses, instances or dotted
# paths) called before and after every publish and publish_batch.
PUBLISH_HOOKS = ()

# --- Retries --------------------------------------------------------------

# A failed task is retried after min(RETRY_DELAY_MULTIPLE_SEC * 2**retry_num,
# SQS_MAX_TASK_DELAY_SEC) seconds (SQS cannot delay a message longer than 900).
RETRY_DELAY_MULTIPLE_SEC = 60
SQS_MAX_TASK_DELAY_SEC = 900

# Spread retries of tasks that failed together: each delay is multiplied by a
# random factor in [1 - RETRY_DELAY_JITTER, 1 + RETRY_DELAY_JITTER].
RETRY_DELAY_JITTER = 0.0

# --- The worker -----------------------------------------------------------

# A worker whose resident memory passes this many MB releases its batch and
# exits with code 3 (kale.worker.EXIT_MEMORY_LIMIT) for its supervisor to
# restart it. 0 turns the check off.
DIE_ON_RESIDENT_SET_SIZE_MB = 256

# How a worker runs its tasks (`kale worker --pool`): 'serial', one at a
# time (CPU-bound work: scale with processes); 'threads', up to
# WORKER_MAX_IN_FLIGHT at once on threads of the worker (blocking I/O);
# 'asyncio', up to WORKER_MAX_IN_FLIGHT at once, `async def run_task` on the
# worker's event loop and plain tasks on its threads (asyncio code).
WORKER_POOL = 'serial'

# Tasks one worker process runs at once on the threads and asyncio pools
# (`kale worker --max-in-flight`). None: 16 for threads, 100 for asyncio.
WORKER_MAX_IN_FLIGHT = None

# Seconds a task may go on running after its time_limit stopped it (a
# thread blocked in a C call, a coroutine that never awaits) before the
# worker stops taking tasks and exits with code 4 (kale.worker.EXIT_STUCK)
# for its supervisor to start a fresh process.
WORKER_STUCK_GRACE_SEC = 10

# Callables (or dotted paths to them) run once when a worker starts and once
# when it stops: the on_worker_startup and on_worker_shutdown hooks, written
# as plain functions. A startup function that raises stops the worker from
# starting; a shutdown function that raises is logged.
ON_WORKER_STARTUP = None
ON_WORKER_SHUTDOWN = None

# Worker hooks (kale.hooks.WorkerHooks subclasses, instances or dotted paths)
# that every worker calls: startup, shutdown, before/after each batch, as
# each task starts and finishes, and each task's outcome.
WORKER_HOOKS = ()

# Where a task runs. 'none': in the worker process, held to its time_limit by
# TASK_TIMEOUT_CLASS. 'process': in a child forked for each run, killed at its
# time_limit even when it hangs in C code or ignores signals; a child that
# crashes (os._exit, a segfault, the out-of-memory killer) fails that run and
# the worker carries on. Costs a fork per task (about a millisecond).
TASK_ISOLATION = 'none'

# How a task is held to its time_limit: a dotted path to a
# kale.timeout.BaseTimeout subclass. Empty: kale.timeout.SignalTimeout
# (SIGALRM, sub-second precision).
TASK_TIMEOUT_CLASS = ''

# Longest pause, in seconds, between attempts while the endpoint is
# unreachable or throttling (the pause doubles from 0.5 s up to this).
SQS_ERROR_MAX_BACKOFF_SEC = 30

# A burst worker (`kale worker --burst`) that cannot reach the endpoint for
# this many seconds in a row exits with code 1 and one line saying why, so a
# CI job that runs it ends. A serving worker keeps retrying however long it
# takes.
BURST_GIVE_UP_SEC = 60

# --- Task records and `kale web` --------------------------------------------

# Where every task's record (status, attempts, labels, inputs, times, error,
# result) is kept: a SQLAlchemy URL, e.g. 'sqlite:////var/lib/kale/records.db'
# (one machine, several processes; WAL mode) or
# 'postgresql://user:password@host/db' (a fleet; needs kale-sqs[postgres]).
# Kale creates and migrates its tables. Empty: records off. Needs
# kale-sqs[records].
RECORDS_URL = ''

# Seconds a succeeded record is kept after it finished, and a failed or
# cancelled one (QuantumLeap's success and failure TTLs). None keeps them
# until `kale tasks purge` or DELETE /api/tasks removes them.
RECORDS_SUCCEEDED_TTL_SEC = 24 * 3600
RECORDS_FAILED_TTL_SEC = 7 * 24 * 3600
# Seconds a queued or scheduled record is kept after its last event: SQS
# keeps a message at most 14 days (its retention period), so a task queued
# longer will never run. None keeps them.
RECORDS_QUEUED_TTL_SEC = 14 * 24 * 3600

# Records waiting to be written, at most, per process: past it the oldest are
# dropped (counted and logged), so a store that is down never holds up work.
RECORDS_BUFFER_SIZE = 10000

# Seconds between a worker's heartbeats in its row; one silent for three of
# these is shown as lost.
RECORDS_HEARTBEAT_SEC = 10

# Seconds between two purges of expired records by a worker (each worker
# purges about this often, at a random offset).
RECORDS_PURGE_INTERVAL_SEC = 300

# Seconds a worker waits for a batch's outcomes to be written to the records
# before it deletes the batch's messages, so that a worker killed right after
# a delete leaves no record behind what happened. A store that is down or
# slow costs each batch at most this long; 0 does not wait (outcomes then
# follow the deletes, and kill -9 can lose the last ones).
RECORDS_SETTLE_WAIT_SEC = 2.0

# Directory where a worker keeps, on disk, the outcomes the records store did
# not take within that wait (down or slow), until the store has them; a
# worker that starts writes those of gone workers of this machine. Empty:
# '<database>-kale-spool' beside a SQLite file, else kale/records-spool in
# the user's cache directory.
RECORDS_SPOOL_DIR = ''

# What records keep of a task's arguments, result, error message and
# traceback: 'encrypt' keeps them, sealed under a key derived from
# MESSAGE_ENCRYPTION_KEY when one is set (in clear otherwise, as SQS holds
# them); 'drop' keeps none of them (a task's record_args = False drops its
# arguments alone).
RECORDS_SENSITIVE_DATA = 'encrypt'

# Largest rendering, in characters of JSON, of a task's arguments or result
# kept in its record; longer ones are kept cut, marked as truncated.
RECORDS_MAX_VALUE_CHARS = 4000

# Largest serialized result of a workflow node kept in the records
# database; a larger one is kept in S3 when PAYLOAD_BUCKET is set, and fails
# its node otherwise.
WORKFLOW_RESULT_MAX_BYTES = 256 * 1024

# Seconds between a worker's sweeps of the workflows: each publishes the
# nodes that were recorded ready to run but never published (their
# submitter or worker died in between) and fails the nodes of workflows past
# their deadline.
WORKFLOW_SWEEP_SEC = 2.0

# Seconds a node may stay recorded ready to run but unpublished before a
# sweep publishes it: long enough that the process that made it ready has
# published it in the meantime, under normal operation.
WORKFLOW_PUBLISH_GRACE_SEC = 5.0

# Periodic tasks run by `kale scheduler` (or `kale worker --scheduler`) for
# tasks whose classes do not say `schedule = ...` themselves: a dict of
# schedule names to {'task': 'myapp.tasks.Report', 'schedule': '0 3 * * *'
# (five-field cron) or 300 (every N seconds), and optionally 'tz' (an IANA
# zone, default 'UTC'), 'args', 'kwargs', 'catch_up' ('last', 'all' or
# 'none') and 'queue'}. See README "Periodic tasks and long delays".
SCHEDULES = {}  # type: dict[str, dict]

# Seconds within which a scheduler that dies is replaced by another: the
# leader renews its lease in the task records every quarter of this.
SCHEDULER_LEASE_SEC = 15

# Seconds within which a slot of a task's concurrency_limit held by a worker
# that died (kill -9) is free again: a worker renews the leases of its runs
# every third of this. See README "Flow control".
CONCURRENCY_LEASE_SEC = 60

# Where the token buckets of rate_limit and the leases of concurrency_limit
# are kept: a SQLAlchemy URL ('sqlite:///flow.db' for the workers of one
# machine, 'postgresql://...' for a fleet). Empty: the task records'
# database (RECORDS_URL). See README "Flow control".
RATE_LIMIT_URL = ''

# Directory of executor programs (`kale worker --executors DIR`): a task
# whose method is NAME runs the program DIR/NAME, its arguments as a JSON
# list on its standard input and its result as JSON on its standard output.
# Empty: this worker runs no executors.
EXECUTOR_DIR = ''

# Bytes of an executor program's standard error kept (its last ones) in its
# task's record, and of its standard output read (more fails the run as
# bad_output).
EXECUTOR_STDERR_MAX_BYTES = 64 * 1024
EXECUTOR_STDOUT_MAX_BYTES = 16 * 1024 * 1024

# Seconds between the SIGTERM an executor program's process group gets at
# its time limit and the SIGKILL that follows if it has not exited.
EXECUTOR_KILL_GRACE_SEC = 5.0

# The database whose outbox `kale relay` sends (a SQLAlchemy URL: the
# application's own database, where outbox.publish inserts). Empty: give
# `kale relay --url URL`.
OUTBOX_URL = ''

# Seconds between the relay's polls of the outbox (on PostgreSQL it also
# wakes at once on NOTIFY).
OUTBOX_POLL_SEC = 1.0

# Seconds a consumed task id (outbox.consume_once) is kept: longer than SQS
# keeps a message (14 days), so no redelivery can find it gone.
CONSUMED_TTL_SEC = 15 * 24 * 3600

# Bearer token `kale web` requires when it listens on anything but a loopback
# address (the environment variable KALE_WEB_TOKEN overrides it). Without
# one, `kale web --host 0.0.0.0` refuses to start.
WEB_TOKEN = ''

# Lets `kale web` take submissions (POST /api/workflows) without a bearer
# token, for local use on loopback. Off: submitting needs WEB_TOKEN.
WEB_ALLOW_SUBMIT_WITHOUT_TOKEN = False

# Host names `kale web` answers for, besides the loopback names and the
# address it serves (a `Host` header naming anything else is refused, so a
# page on an attacker's domain that resolves to 127.0.0.1 cannot read the
# API). With a token set, the token guards the API and any host is answered
# unless this list is set. '*' answers any host.
WEB_ALLOWED_HOSTS = ()

# --- Webhooks ----------------------------------------------------------------

# The queue the deliveries of webhooks (kale.webhooks) are published to.
WEBHOOK_QUEUE = 'default'

# Seconds one delivery may take, redirects included (connecting, sending,
# and reading the start of the answer); a slower one is retried.
WEBHOOK_TIMEOUT_SEC = 10

# Hosts webhooks may reach although their addresses are private, loopback,
# link-local or otherwise not public (those are refused otherwise): names or
# IP addresses, each optionally with ':PORT', e.g. ('hooks.internal:8443',).
WEBHOOK_ALLOWED_HOSTS = ()

# --- Observability ----------------------------------------------------------

# Port on which `kale worker` serves Prometheus metrics at /metrics (one
# endpoint for all the workers of `kale worker --concurrency N`); 0 turns
# metrics off. Set, every Kale process also records kale_published_total.
# `kale worker --metrics-port N` overrides it. Needs prometheus_client
# (pip install 'kale-sqs[metrics]').
METRICS_PORT = 0

# Address the metrics endpoint listens on: this machine only by default;
# '0.0.0.0' (all interfaces) for a Prometheus server elsewhere to scrape. It
# shows queue and task names and counts, never task ids or arguments.
METRICS_HOST = '127.0.0.1'

# 'text' or 'json' (one JSON object a line: time, level, logger, message, and
# task_id, task, queue, attempt and worker where known), for `kale` commands.
LOG_FORMAT = 'text'

# Whether a worker's log lines about a failed run carry the exception's
# message ('retrying in 60s: ValueError: card 4111... refused') or only its
# type ('ValueError'). Messages often carry arguments: with
# MESSAGE_ENCRYPTION_KEY set the lines carry the type only, whatever this says.
LOG_EXCEPTION_MESSAGES = True

# OpenTelemetry traces: spans kale.publish, kale.run (a child of the
# publisher's span, whose context travels in the signed envelope) and
# kale.settle, through opentelemetry's global tracer provider and propagator.
# Needs opentelemetry-api (pip install 'kale-sqs[otel]'); with it missing, a
# process that publishes or works with TRACING on stops with one line saying so.
TRACING = False
