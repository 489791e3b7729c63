"""Where a benchmark runs: an SQS endpoint (embedded or given) or the memory transport.

Each run gets queues of its own (a fresh ``QUEUE_PREFIX``), so no run
inherits another's messages and moto's queues stay short.
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

from bench.counter import RequestCounter
from bench.raw import RawQueues, boto3_client
from kale import publisher as kale_publisher
from kale.broker import Broker, get_broker
from kale.cli.sqs_local import SQSLocalProcess
from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.queue_config import TaskQueue, get_queue_config
from kale.transport.memory import MemoryTransport

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUEUE_NAMES = ['bench_high', 'bench_default', 'bench_low']
PRIORITIES = {'bench_high': 100, 'bench_default': 40, 'bench_low': 5}


class Run:
    """One benchmark run's queues, broker (for Kale) and raw access (for the baseline)."""

    def __init__(self, env: 'Environment', prefix: str):
        self.env = env
        self.prefix = prefix
        self.counter = RequestCounter()       # Kale's requests in this process
        self.raw_counter = RequestCounter()   # the baseline's
        if env.memory:
            self.transport = MemoryTransport(env.latency_sec, on_request=self._count)
            self.broker = Broker(self.transport, get_queue_config(), prefix=prefix)
            self.raw = RawQueues(memory=self.transport)
        else:
            self.broker = get_broker()
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
    """The endpoint (or memory transport) and the settings every run shares."""

    def __init__(self, transport: str = 'sqs', endpoint: Optional[str] = None,
                 latency_ms: float = 0.0):
        self.memory = transport == 'memory'
        self.endpoint = endpoint or ''
        self.latency_sec = latency_ms / 1000.0
        self.workdir = tempfile.mkdtemp(prefix='kale-bench-')
        self._server: Optional[SQSLocalProcess] = None
        self.embedded = False

    def describe(self) -> str:
        if self.memory:
            return 'memory transport, %g ms per request' % (self.latency_sec * 1000)
        return 'SQS endpoint %s%s' % (self.endpoint, ' (embedded moto)' if self.embedded else '')

    def start(self) -> 'Environment':
        if not self.memory and not self.endpoint:
            self._server = SQSLocalProcess(cwd=ROOT)
            self.endpoint = self._server.url
            self.embedded = True
        os.environ.update({ENVIRONMENT_VARIABLE: 'bench.settings',
                           'KALE_BENCH_ENDPOINT': self.endpoint,
                           'KALE_BENCH_ACCESS_KEY': 'bench', 'KALE_BENCH_SECRET_KEY': 'bench'})
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def new_run(self, long_poll_sec: int = 1) -> Run:
        """Fresh queues (and settings) for one run."""
        prefix = 'b%s-' % uuid.uuid4().hex[:8]
        config = os.path.join(self.workdir, prefix + 'queues.yaml')
        with open(config, 'w') as f:
            json.dump({name: {'priority': PRIORITIES[name], 'batch_size': 10,
                              'visibility_timeout_sec': 60, 'long_poll_time_sec': long_poll_sec,
                              'num_iterations': 10} for name in QUEUE_NAMES}, f)
        os.environ.update({'KALE_BENCH_PREFIX': prefix, 'KALE_BENCH_QUEUE_CONFIG': config})
        settings.reload()
        return Run(self, prefix)

    def worker_env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
        env.update(extra)
        return env

    def start_worker(self, *args: str, **extra_env: str) -> subprocess.Popen:
        """`kale worker` as its own process (SQS transport)."""
        return subprocess.Popen([sys.executable, '-m', 'kale', 'worker', '--log-level', 'WARNING',
                                 '--queues', ','.join(QUEUE_NAMES), *args],
                                cwd=ROOT, env=self.worker_env(**extra_env))

    def report_path(self) -> str:
        return os.path.join(self.workdir, 'report-%s.json' % uuid.uuid4().hex[:8])


def read_report(path: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)
