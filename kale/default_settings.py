"""Every Kale setting, declared once: its name, type, default, check and meaning,
in the :class:`Settings` table below, the source of :class:`kale.config.Config`, its
checks and the settings reference (docs/explanation/internals-top.md, "Settings and
the configuration")."""
from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Union

from kale import settings_check as checks

Key = Union[str, bytes]
#: A hook: an instance, a class, or the dotted path of one.
HookSpec = Any
#: A dotted path, or the object it names.
PathOr = Union[str, Any]


def setting(default: Any, check: checks.Check, doc: str, *, shown: Optional[str] = None,
            secret: bool = False) -> Any:
    """One row of the table: ``default``, the ``check`` a value must pass, the
    one-line ``doc``; ``shown``: how the reference shows a computed default;
    ``secret``: its value is never shown."""
    metadata = {'default': default, 'check': check, 'doc': doc, 'shown': shown,
                'secret': secret}
    if isinstance(default, dict):           # each config gets its own copy
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True, eq=False)
class Settings:
    """The table: one field per setting, in the order of the reference."""

    # --- Where SQS is ---------------------------------------------------------

    MESSAGE_QUEUE_ENDPOINT_URL: str = setting('', checks.url,
        'URL of an SQS-compatible endpoint (`kale sqs-local`, ElasticMQ, a VPC endpoint); '
        'empty for AWS')
    MESSAGE_QUEUE_USE_PROXY: bool = setting(False, checks.BOOL,
        "the original Kale's switch: with no endpoint URL, send requests to "
        '`http://HOST:PORT` below')
    MESSAGE_QUEUE_PROXY_HOST: str = setting('127.0.0.1', checks.TEXT,
        'the host of that endpoint (with `MESSAGE_QUEUE_USE_PROXY`)')
    MESSAGE_QUEUE_PROXY_PORT: Union[int, str, None] = setting(9324, checks.port,
        'the port of that endpoint (with `MESSAGE_QUEUE_USE_PROXY`)')
    AWS_REGION: str = setting('', checks.region,
        "region; empty: boto3's chain (`us-east-1` with a custom endpoint)")
    AWS_ACCESS_KEY_ID: str = setting('', checks.TEXT,
        "the access key id; empty: boto3's chain (environment, `~/.aws`, instance or task "
        'role)')
    AWS_SECRET_ACCESS_KEY: str = setting('', checks.TEXT,
        "its secret access key; empty: boto3's chain", secret=True)
    AWS_SESSION_TOKEN: str = setting('', checks.TEXT,
        "the session token of temporary credentials; empty: boto3's chain", secret=True)
    SQS_CONNECT_TIMEOUT_SEC: float = setting(5, checks.number(0.1, 300),
        'seconds to connect before the endpoint counts as unreachable')
    SQS_READ_TIMEOUT_SEC: float = setting(10, checks.number(1, 600),
        "seconds to wait for a response beyond a long poll: a worker's or publisher's client "
        'waits this plus 20 s (the longest long poll) and makes a request up to 3 times in all, '
        'direct requests included (a receive sent whose answer did not come: once, as SQS may '
        'have taken its messages); operator commands (`kale queues`, `purge`, `dlq redrive`) '
        'wait this plus 1 s, once, so they give up in about this long')
    SQS_DIRECT_REQUESTS: bool = setting(True, checks.BOOL,
        "receives, deletes, visibility changes and sends are built and signed by Kale and "
        "sent on boto3's own HTTP session (half the client CPU of botocore's request pipeline; "
        'anything but a success goes through botocore); False: every request through '
        "botocore's pipeline, for handlers hooked onto its events before `before-send`")

    # --- Queues ---------------------------------------------------------------

    QUEUE_CONFIG: str = setting('queue_config.yaml', checks.kind(str, 'a file path (a string)'),
        'the queue config; a relative path is tried from the current directory, then the '
        "settings module's")
    QUEUE_PREFIX: str = setting('', checks.TEXT,
        'prepended to every SQS queue name, so environments or test runs can share an account')
    QUEUE_CLASS: PathOr = setting('kale.queue_config.TaskQueue', checks.dotted_path_or('class'),
        'class each queue-config entry becomes (a subclass may add fields)')
    QUEUE_SELECTOR: PathOr = setting(
        'kale.queue_selector.ReducedLottery', checks.dotted_path_or('class'),
        'dotted path of the queue selection algorithm')
    CREATE_MISSING_QUEUES: bool = setting(True, checks.BOOL,
        'create a missing queue and its dead-letter queue on first use; turn off where '
        'infrastructure code owns the queues')
    AUTO_CREATE_TOPICS: bool = setting(False, checks.BOOL,
        'publishers and workers create SNS topics, their subscriptions and the queue policies '
        'on first use, as `kale topics sync` does (see [Events and '
        'webhooks](#events-and-webhooks))',
        shown='`False` (`True` in the `local` and `elasticmq` presets)')
    ENABLE_DEAD_LETTER_QUEUE: bool = setting(True, checks.BOOL,
        'dead-letter permanent failures and undecodable messages; off: log and delete them')
    MAX_RECEIVE_COUNT: int = setting(10, checks.number(1, 1000, whole=True),
        'receives after which SQS moves a message to the dead-letter queue (redrive policy of '
        'created queues)')

    # --- Messages -------------------------------------------------------------

    MESSAGE_SIGNING_KEY: Key = setting('', checks.KEY,
        'the HMAC-SHA256 key every publisher and worker shares (required): 16 bytes or more '
        'with an endpoint on this machine, 32 or more with a remote one (AWS, or any host not '
        'on this machine, `0.0.0.0` included)', secret=True)
    MESSAGE_SIGNING_OLD_KEYS: Union[Key, Sequence[Key]] = setting((), checks.KEYS,
        'keys that still verify during a rotation', secret=True)
    MESSAGE_MAX_AGE_SEC: float = setting(14 * 24 * 3600 + 15 * 60, checks.number(60),
        'the replay window: older messages are dead-lettered (`expired`), unrun',
        shown='14 days + 15 min')
    ACCEPT_SERIALIZERS: Sequence[str] = setting((), checks.subset_of('pickle', 'json'),
        'serializers a worker accepts (empty: just `SERIALIZER`); others are dead-lettered '
        '(`serializer_not_accepted`) before decoding')
    ACCEPT_LEGACY_MESSAGES: bool = setting(False, checks.BOOL,
        'accept bodies of the earlier `kale1` format, only to drain queues during an upgrade')
    MESSAGE_ENCRYPTION_KEY: Key = setting('', checks.KEY,
        'a secret of 32+ characters: bodies are encrypted with AES-256-GCM (key derived by '
        'HKDF); needs `cryptography`', secret=True)
    MESSAGE_ENCRYPTION_OLD_KEYS: Union[Key, Sequence[Key]] = setting((), checks.KEYS,
        'secrets that still decrypt during a rotation', secret=True)
    MAX_DECOMPRESSED_BYTES: int = setting(16 * 1024 * 1024, checks.number(1024, whole=True),
        'largest payload a body may decompress to; publishing refuses bigger ones')
    TASK_MODULES: Sequence[str] = setting((), checks.module_prefixes,
        'module prefixes task paths must start with; a message naming any other task is '
        'dead-lettered (`unknown_task`) and its module never imported')
    SERIALIZER: str = setting('pickle', checks.one_of('pickle', 'json'),
        "`'pickle'` or `'json'` (workers read both)")
    PICKLE_PROTOCOL: int = setting(pickle.DEFAULT_PROTOCOL, checks.number(2, 5, whole=True),
        'protocol for pickled bodies', shown='`pickle.DEFAULT_PROTOCOL`')
    COMPRESSION_MIN_BYTES: int = setting(512, checks.number(0, whole=True),
        'bodies at least this long are compressed when that helps')
    SQS_TASK_SIZE_LIMIT: int = setting(1048576, checks.number(1024, 1048576, whole=True),
        'largest message (body and attributes), in bytes, that publishing accepts and a worker '
        "reads: SQS's 1 MiB; lower it for an endpoint with the older 256 KiB limit")
    SQS_BATCH_REQUEST_LIMIT: int = setting(1048576, checks.number(1024, 1048576, whole=True),
        'largest total size of one `SendMessageBatch` request (SQS: 1 MiB for the ten '
        'messages together); bigger batches are split')
    PAYLOAD_BUCKET: str = setting('', checks.bucket,
        'an S3 bucket for payloads too big for an SQS message (see [Large '
        'payloads](#large-payloads)); empty: off, and such a publish raises '
        '`MessageTooLargeError`')
    PAYLOAD_OFFLOAD_BYTES: int = setting(1048576, checks.number(0, 1048576, whole=True),
        'messages (body and attributes) larger than this keep their payload in '
        '`PAYLOAD_BUCKET`; at most `SQS_TASK_SIZE_LIMIT`, which also caps it')
    TASK_MAPPER: Mapping[str, str] = setting(
        {}, checks.kind(Mapping, 'a dict of old task paths to new ones'),
        "`{'old.path.Task': 'new.path.Task'}`, for tasks moved while messages are queued")
    CHECK_TASK_ARGUMENTS: bool = setting(True, checks.BOOL,
        "refuse, at publish, arguments that do not bind to `run_task`'s signature "
        '(`PublishError`); a task may say `check_arguments = False`')
    PUBLISH_HOOKS: Sequence[HookSpec] = setting((), checks.kind((list, tuple), 'a list'),
        '`PublishHooks` subclasses, instances or dotted paths, called around every publish')

    # --- Retries --------------------------------------------------------------

    RETRY_DELAY_MULTIPLE_SEC: float = setting(60, checks.number(0, 900),
        'first retry delay; doubles with each retry')
    SQS_MAX_TASK_DELAY_SEC: float = setting(900, checks.number(0, 900),
        "the longest retry delay (SQS's limit)")
    RETRY_DELAY_JITTER: float = setting(0.0, checks.number(0, 1),
        'spread retry delays by up to this fraction either way')

    # --- The worker -----------------------------------------------------------

    DIE_ON_RESIDENT_SET_SIZE_MB: float = setting(256, checks.number(0),
        'exit with code 3 past this resident memory; 0 turns it off (a worker on the '
        "in-memory transport, in a test's process, checks only a limit set explicitly)")
    WORKER_POOL: str = setting('serial', checks.one_of(*checks.WORKER_POOLS),
        "how a worker runs its tasks: `'serial'` (one at a time), `'threads'` or `'asyncio'` "
        '(many at once; see [Concurrency](#concurrency)); `kale worker --pool`')
    WORKER_MAX_IN_FLIGHT: Optional[int] = setting(None, checks.optional(checks.number(1, 10000, whole=True)),
        'tasks one worker process runs at once on the threads and asyncio pools; None: 16 and '
        '100; `kale worker --max-in-flight`')
    WORKER_STUCK_GRACE_SEC: float = setting(10, checks.number(0.1, 3600),
        'seconds a task may run on after its time limit stopped it (a thread blocked in a C '
        'call, a coroutine that never awaits) before the worker exits with code 4 for a fresh '
        'process')
    ON_WORKER_STARTUP: Optional[Union[str, Callable[[], Any]]] = setting(
        None, checks.dotted_path_or('callable'),
        'a callable (or its dotted path) run when a worker starts; one that raises stops the '
        'worker from starting')
    ON_WORKER_SHUTDOWN: Optional[Union[str, Callable[[], Any]]] = setting(
        None, checks.dotted_path_or('callable'),
        'a callable (or its dotted path) run when a worker stops; one that raises is logged')
    WORKER_HOOKS: Sequence[HookSpec] = setting((), checks.kind((list, tuple), 'a list'),
        '`WorkerHooks` subclasses, instances or dotted paths')
    TASK_ISOLATION: str = setting('none', checks.one_of(*checks.TASK_ISOLATION_MODES),
        "`'process'`: run each task in a forked child, killed at its time limit; its crash "
        'fails the run, not the worker')
    TASK_TIMEOUT_CLASS: PathOr = setting('', checks.optional_dotted_path,
        'dotted path of a `kale.timeout.BaseTimeout` subclass; empty: `SignalTimeout` (the '
        'serial pool; the threads and asyncio pools hold runs to their limits their own way, '
        'see [Concurrency](#concurrency))')
    SQS_ERROR_MAX_BACKOFF_SEC: float = setting(30, checks.number(0.1, 3600),
        'longest pause between attempts while SQS is unreachable or throttling')
    BURST_GIVE_UP_SEC: float = setting(60, checks.number(0),
        'a `--burst` worker that cannot reach SQS this long exits 1 with one line (a serving '
        'worker keeps retrying)')

    # --- Task records and `kale web` ------------------------------------------

    RECORDS_URL: str = setting('', checks.records_url,
        'SQLAlchemy URL of the [task records](#task-records-and-the-dashboard) '
        '(`sqlite:///...`, `postgresql://...`; `memory://NAME`: kept in this process, for '
        'its tests); empty: off')
    RECORDS_SUCCEEDED_TTL_SEC: Optional[float] = setting(24 * 3600, checks.ttl,
        'seconds a succeeded record is kept after it finished; `None`: until purged by hand',
        shown='one day')
    RECORDS_FAILED_TTL_SEC: Optional[float] = setting(7 * 24 * 3600, checks.ttl,
        'seconds a failed, cancelled, purged or deduplicated record is kept after it '
        'finished; `None`: until purged by hand', shown='one week')
    RECORDS_QUEUED_TTL_SEC: Optional[float] = setting(14 * 24 * 3600, checks.ttl,
        'seconds a queued or scheduled record is kept after its last event (SQS keeps a '
        'message at most 14 days); `None`: kept', shown='14 days')
    RECORDS_BUFFER_SIZE: int = setting(10000, checks.number(10, whole=True),
        'records a process holds while the store is slow or down; past it the oldest are '
        'dropped (counted, logged)')
    RECORDS_HEARTBEAT_SEC: float = setting(10, checks.number(0.1, 3600),
        "seconds between a worker's heartbeats; three missed: lost")
    RECORDS_PURGE_INTERVAL_SEC: float = setting(300, checks.number(1),
        'how often each worker purges expired records')
    RECORDS_SETTLE_WAIT_SEC: float = setting(2.0, checks.number(0, 60),
        "how long a worker waits for a batch's outcomes to be written to the records before "
        "it deletes the batch's messages (so a worker killed right after a delete leaves no "
        'record behind); 0: no wait')
    RECORDS_SPOOL_DIR: str = setting('', checks.TEXT,
        'where a worker keeps on disk the outcomes the records store did not take within '
        '`RECORDS_SETTLE_WAIT_SEC` (down or slow), until it has them; a worker that starts '
        'writes those of gone workers of the machine. Empty: `<database>-kale-spool` beside a '
        "SQLite file, else `kale/records-spool` in the user's cache directory")
    RECORDS_SENSITIVE_DATA: str = setting('encrypt', checks.one_of('encrypt', 'drop'),
        "what records keep of arguments, results, error messages and tracebacks: `'encrypt'` "
        'keeps them, sealed under a key derived from `MESSAGE_ENCRYPTION_KEY` when one is '
        "set; `'drop'` keeps none")
    RECORDS_MAX_VALUE_CHARS: int = setting(4000, checks.number(100, 1000000, whole=True),
        "longest JSON kept of a task's arguments or result")
    WORKFLOW_RESULT_MAX_BYTES: int = setting(
        256 * 1024, checks.number(1024, 64 * 1024 * 1024, whole=True),
        'largest serialized workflow node result kept in the records database; a larger one '
        'goes to S3 with `PAYLOAD_BUCKET` set, and fails its node otherwise')
    WORKFLOW_SWEEP_SEC: float = setting(2.0, checks.number(0.05, 3600),
        'how often each worker publishes workflow nodes left recorded but unpublished, and '
        'fails workflows past their deadline')
    WORKFLOW_PUBLISH_GRACE_SEC: float = setting(5.0, checks.number(0.1, 3600),
        'how long the claim on publishing a workflow node ready to run lasts unrenewed: the '
        'process that made the node ready renews it every third of this while its publish '
        'runs, however long that takes; a sweep publishes a node only once its claim has '
        'lapsed (its publisher died)')
    SCHEDULES: Mapping[str, Mapping[str, Any]] = setting({}, checks.schedules,
        '[periodic tasks](#periodic-tasks) for tasks whose classes say no `schedule`: '
        "`{'name': {'task': 'myapp.tasks.Report', 'schedule': '0 3 * * *' or seconds, 'tz', "
        "'args', 'kwargs', 'catch_up', 'queue'}}`")
    SCHEDULER_LEASE_SEC: float = setting(15, checks.number(1, 3600),
        'a scheduler that dies is replaced by another within this many seconds (the leader '
        'renews its lease in the task records every quarter of it)')
    CONCURRENCY_LEASE_SEC: float = setting(60, checks.number(3, 3600),
        "a slot of a task's `concurrency_limit` held by a worker that died is free again "
        "within this many seconds (a worker renews its runs' leases every third of it); see "
        '[Flow control](#flow-control)')
    RATE_LIMIT_URL: str = setting('', checks.rate_limit_url,
        'where the buckets of `rate_limit` and the leases of `concurrency_limit` are kept: '
        '`sqlite:///...` for the workers of one machine, `postgresql://...` for a fleet; '
        "empty: the task records' database (`RECORDS_URL`). Redis is refused in one line (see "
        '[Flow control](#flow-control))')
    EXECUTOR_DIR: str = setting('', checks.kind(str, 'a directory path'),
        'the directory of executor programs (`kale worker --executors DIR`); empty: the '
        'worker runs none')
    EXECUTOR_STDERR_MAX_BYTES: int = setting(
        64 * 1024, checks.number(0, 16 * 1024 * 1024, whole=True),
        "the last bytes of a program's standard error kept in its task's record")
    EXECUTOR_STDOUT_MAX_BYTES: int = setting(
        16 * 1024 * 1024, checks.number(1, 1024 * 1024 * 1024, whole=True),
        "the most of a program's standard output read; more fails the run as `bad_output`")
    EXECUTOR_KILL_GRACE_SEC: float = setting(5.0, checks.number(0, 600),
        "seconds between the SIGTERM a program's group gets at its time limit and the SIGKILL "
        'of everything it started')
    OUTBOX_URL: str = setting('', checks.TEXT,
        "the database whose outbox `kale relay` sends (your application's, a SQLAlchemy URL); "
        '`--url` overrides it')
    OUTBOX_POLL_SEC: float = setting(1.0, checks.number(0.01, 3600),
        'how often the relay polls the outbox (on PostgreSQL it also wakes at once on NOTIFY)')
    CONSUMED_TTL_SEC: Optional[float] = setting(15 * 24 * 3600, checks.ttl,
        'how long a task id marked by `outbox.consume_once` is kept (15 days); None keeps '
        'them')
    WEB_TOKEN: str = setting('', checks.TEXT,
        'the bearer token `kale web` requires off loopback (`KALE_WEB_TOKEN` overrides)',
        secret=True)
    WEB_ALLOW_SUBMIT_WITHOUT_TOKEN: bool = setting(False, checks.BOOL,
        'let `kale web` take submissions (`POST /api/workflows`) without a bearer token, for '
        'local use; otherwise submitting needs `WEB_TOKEN`')
    WEB_ALLOWED_HOSTS: Sequence[str] = setting((), checks.host_names,
        'host names `kale web` answers for besides the loopback names and the address it '
        "serves (DNS-rebinding guard); with a token, any host unless this is set; `'*'`: any")

    # --- Webhooks -------------------------------------------------------------

    WEBHOOK_QUEUE: str = setting('default', checks.kind(str, 'a queue name (a string)'),
        'the queue [webhook](#webhooks) deliveries are published to')
    WEBHOOK_TIMEOUT_SEC: float = setting(10, checks.number(0.1, 300),
        'seconds one webhook delivery may take, redirects included (connect, send, read the '
        "start of the answer); a slower one is retried. The delivery task's time limit is "
        'this plus 5')
    WEBHOOK_ALLOWED_HOSTS: Sequence[str] = setting((), checks.host_names,
        'hosts webhooks may reach although their addresses are not public (private, loopback, '
        'link-local, ...): names or IP addresses, each with `:PORT` to allow that port only')

    # --- Observability --------------------------------------------------------

    METRICS_PORT: int = setting(0, checks.number(0, 65535, whole=True),
        'serve Prometheus metrics from `kale worker` at `/metrics` on this port (one endpoint '
        'for all workers of `--concurrency N`); 0: off. Needs `kale-sqs[metrics]`; see '
        '[Monitoring](#monitoring)')
    METRICS_HOST: str = setting('127.0.0.1', checks.TEXT,
        "the address that endpoint listens on; `'0.0.0.0'` lets a Prometheus server elsewhere "
        'scrape it')
    LOG_FORMAT: str = setting('text', checks.one_of('text', 'json'),
        "`'json'`: `kale` commands log one JSON object a line, with `task_id`, `task`, "
        '`queue`, `attempt` and `worker` where known')
    LOG_EXCEPTION_MESSAGES: bool = setting(True, checks.BOOL,
        "a failed run's log line carries its exception's message as well as its type; `False` "
        '(and always with `MESSAGE_ENCRYPTION_KEY` set) the type only, since messages often '
        'carry arguments')
    TRACING: bool = setting(False, checks.BOOL,
        'OpenTelemetry spans `kale.publish`, `kale.run`, `kale.settle`; needs '
        '`kale-sqs[otel]` (an error at start without it)')


#: Each setting's row: name -> its dataclass field, whose metadata holds its
#: ``default``, ``check``, ``doc``, ``shown`` and ``secret``.
TABLE: dict[str, dataclasses.Field] = {field.name: field
                                       for field in dataclasses.fields(Settings)}

globals().update({name: field.metadata['default'] for name, field in TABLE.items()})
