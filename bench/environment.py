"""Where a benchmark runs: an SQS endpoint (with or without a latency proxy in
front of it) or the memory transport.

Each run gets queues of its own (a fresh ``QUEUE_PREFIX``), so no run
inherits another's messages and moto's queues stay short. The three bench
queues stand for the shipped ``high_priority``, ``default`` and
``low_priority`` queues; their long polls are either equal (20 s each) or
those of the shipped queue_config.yaml.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Optional

import yaml

from bench.counter import RequestCounter
from bench.raw import RawQueues, boto3_client
from bench.servers import LatencyProxy, round_trip_ms
from kale import publisher as kale_publisher
from kale.app import default_app
from kale.broker import Broker
from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.queue_config import TaskQueue, build_queue_config
from kale.transport.memory import MemoryTransport

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUEUE_NAMES = ['bench_high', 'bench_default', 'bench_low']
PRIORITIES = {'bench_high': 100, 'bench_default': 40, 'bench_low': 5}
#: The shipped queue each bench queue stands for.
SHIPPED_NAMES = {'bench_high': 'high_priority', 'bench_default': 'default',
                 'bench_low': 'low_priority'}
SHIPPED_CONFIG = os.path.join(ROOT, 'queue_config.yaml')
#: Long polls of the bench queues, in QUEUE_NAMES order.
LongPolls = tuple[int, ...]
EQUAL_LONG_POLLS: LongPolls = (20, 20, 20)
DRAIN_LONG_POLLS: LongPolls = (1, 1, 1)


def shipped_long_polls(path: str = SHIPPED_CONFIG) -> LongPolls:
    """The long polls of the shipped queue_config.yaml, in QUEUE_NAMES order."""
    with open(path) as f:
        config = yaml.safe_load(f)
    return tuple(int(config[SHIPPED_NAMES[name]]['long_poll_time_sec']) for name in QUEUE_NAMES)


def implied_idle_per_minute(long_polls: LongPolls) -> float:
    """Requests per minute of one long poll after another on each empty queue."""
    return sum(60.0 / max(seconds, 1) for seconds in long_polls)


class Run:
    """One benchmark run's queues, broker (for Kale) and raw access (for the baseline)."""

    def __init__(self, env: 'Environment', prefix: str):
        self.env = env
        self.prefix = prefix
        self.counter = RequestCounter()       # Kale's requests in this process
        self.raw_counter = RequestCounter()   # the baseline's
        if env.memory:
            self.transport = MemoryTransport(env.latency_sec, on_request=self._count)
            self.broker = Broker(self.transport, build_queue_config(settings.config), prefix=prefix,
                                 config=settings.config)
            self.raw = RawQueues(memory=self.transport)
        else:
            self.broker = default_app().broker
            self.counter.attach(self.broker.transport.client)
            self.raw = RawQueues(boto3_client(env.endpoint, access_key='bench',
                                              secret_key='bench'))
            self.raw_counter.attach(self.raw.client)
        self.counting_raw = False
        self._previous = kale_publisher.set_publisher(kale_publisher.Publisher(self.broker))
        self.queues: list[TaskQueue] = [self.broker.queues[name] for name in QUEUE_NAMES]
        for queue in self.queues:
            self.broker.declare(queue)
        self.counter.events.clear()           # setting up is not part of any figure

    def _count(self, operation: str) -> None:
        (self.raw_counter if self.counting_raw else self.counter).record(operation)

    def sqs_names(self) -> list[str]:
        return [self.broker.sqs_name(queue) for queue in self.queues]

    def close(self) -> None:
        self.counter.detach()
        self.raw_counter.detach()
        kale_publisher.set_publisher(self._previous)


class Environment:
    """The endpoint (or memory transport) and the settings every run shares.

    ``latency_ms`` is added to every request: by the memory transport itself,
    or by a latency proxy started in front of the SQS endpoint, which Kale and
    the baseline then both talk to."""

    def __init__(self, transport: str = 'sqs', endpoint: str = '', latency_ms: float = 0.0,
                 endpoint_kind: str = 'given'):
        self.memory = transport == 'memory'
        self.upstream = endpoint            # the SQS endpoint itself
        self.endpoint = endpoint            # where requests go: the proxy, when there is one
        self.endpoint_kind = endpoint_kind
        self.latency_ms = latency_ms
        self.latency_sec = latency_ms / 1000.0 if self.memory else 0.0
        self.workdir = tempfile.mkdtemp(prefix='kale-bench-')
        self._proxy: Optional[LatencyProxy] = None
        #: Measured median round trip of a cheap request, without and with the proxy.
        self.round_trips_ms: dict[str, float] = {}

    def describe(self) -> str:
        if self.memory:
            return 'memory transport, %g ms per request' % self.latency_ms
        text = 'SQS endpoint %s (%s)' % (self.upstream, self.endpoint_kind)
        if self._proxy is not None:
            text += ', +%g ms per request through a latency proxy at %s' % (self.latency_ms,
                                                                            self.endpoint)
        if self.round_trips_ms:
            text += '; measured round trip %s' % ', '.join(
                '%s %.2f ms' % item for item in self.round_trips_ms.items())
        return text

    def start(self) -> 'Environment':
        if not self.memory and self.latency_ms:
            self._proxy = LatencyProxy(self.upstream, self.latency_ms,
                                       os.path.join(self.workdir, 'latency-proxy.log'))
            self.endpoint = self._proxy.start()
        if not self.memory:
            self.round_trips_ms['direct'] = round_trip_ms(self.upstream)
            if self._proxy is not None:
                self.round_trips_ms['through the proxy'] = round_trip_ms(self.endpoint)
        os.environ.update({ENVIRONMENT_VARIABLE: 'bench.settings',
                           'KALE_BENCH_ENDPOINT': self.endpoint,
                           'KALE_BENCH_ACCESS_KEY': 'bench', 'KALE_BENCH_SECRET_KEY': 'bench'})
        return self

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None

    def new_run(self, long_polls: LongPolls = DRAIN_LONG_POLLS, records_url: str = '',
                rate_limit_url: str = '') -> Run:
        """Fresh queues (and settings) for one run; ``long_polls`` in QUEUE_NAMES order.
        ``records_url`` turns task records on for the run (its workers too);
        ``rate_limit_url`` is where its flow control keeps buckets and leases."""
        prefix = 'b%s-' % uuid.uuid4().hex[:8]
        config = os.path.join(self.workdir, prefix + 'queues.yaml')
        with open(config, 'w') as f:
            json.dump({name: {'priority': PRIORITIES[name], 'batch_size': 10,
                              'visibility_timeout_sec': 60, 'long_poll_time_sec': long_poll,
                              'num_iterations': 10}
                       for name, long_poll in zip(QUEUE_NAMES, long_polls, strict=True)}, f)
        os.environ.update({'KALE_BENCH_PREFIX': prefix, 'KALE_BENCH_QUEUE_CONFIG': config,
                           'KALE_BENCH_RECORDS_URL': records_url,
                           'KALE_BENCH_RATE_LIMIT_URL': rate_limit_url})
        settings.reload()
        return Run(self, prefix)

    def worker_env(self, root: str = ROOT, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env['PYTHONPATH'] = root + os.pathsep + env.get('PYTHONPATH', '')
        env.update(extra)
        return env

    def start_worker(self, *args: str, root: str = ROOT, **extra_env: str) -> subprocess.Popen:
        """`kale worker` as its own process (SQS transport), from the checkout
        at ``root`` (another one: ``--versus``)."""
        return subprocess.Popen([sys.executable, '-m', 'kale', 'worker', '--log-level', 'WARNING',
                                 '--queues', ','.join(QUEUE_NAMES), *args],
                                cwd=root, env=self.worker_env(root, **extra_env))

    def report_path(self) -> str:
        return os.path.join(self.workdir, 'report-%s.json' % uuid.uuid4().hex[:8])


def read_report(path: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)
