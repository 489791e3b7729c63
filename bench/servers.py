"""The processes a benchmark runs against: the SQS endpoint every configuration
shares (embedded moto, fauxqs, or a URL given), and a latency proxy in front of it.

fauxqs is a fast SQS emulator from npm, installed and started by
:mod:`bench.fauxqs`. The latency proxy (:mod:`bench.proxy`) holds each
client-to-server chunk for a number of milliseconds. Every process started
here is stopped by its own pid (or process group), also after Ctrl-C.
"""
from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from typing import Optional

import boto3
import botocore.exceptions

from bench import fauxqs
from kale.cli.sqs_local import SQSLocalProcess

#: The checkout (``python -m bench.proxy`` runs from it).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_HOSTS = {'127.0.0.1', 'localhost'}


class BenchError(Exception):
    """A benchmark that cannot run as asked; its message is one line for the user."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its reaper does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def wait_for_port(port: int, pid: int, what: str, timeout: float = 30.0) -> None:
    """Until something accepts connections on 127.0.0.1:``port``; BenchError when
    process ``pid`` dies first or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise BenchError('%s (pid %d) exited before it listened on port %d' % (what, pid, port))
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError('%s (pid %d) did not listen on port %d within %gs' % (what, pid, port, timeout))


def stop_process(pid: int, group: Optional[int] = None, timeout: float = 5.0) -> None:
    """SIGTERM ``pid`` (and its process ``group``), SIGKILL what is left after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for send, target in ((os.kill, pid), (os.killpg, group)):
            if target is not None:
                try:
                    send(target, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _alive(pid):
            return


def round_trip_ms(url: str, requests: int = 30) -> float:
    """Median milliseconds of a cheap request (ListQueues) to the endpoint."""
    client = boto3.client('sqs', endpoint_url=url, region_name='us-east-1',
                          aws_access_key_id='bench', aws_secret_access_key='bench')
    times = []
    for _ in range(requests + 3):
        started = time.perf_counter()
        try:
            client.list_queues(QueueNamePrefix='none-such')
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise BenchError('the SQS endpoint %s does not answer: %s' % (url, exc)) from None
        times.append(time.perf_counter() - started)
    return statistics.median(times[3:]) * 1000     # the first ones open the connection


class Fauxqs:
    """fauxqs on a free port of 127.0.0.1 (see :mod:`bench.fauxqs`)."""

    def __init__(self, folder: Optional[str] = None):
        self.folder = folder
        self.process: Optional[subprocess.Popen] = None
        self.url = ''

    def start(self) -> str:
        port = free_port()
        try:
            self.process = fauxqs.start(port, self.folder)
        except fauxqs.FauxqsError as exc:
            raise BenchError(str(exc)) from None
        try:
            wait_for_port(port, self.process.pid, 'fauxqs')
        except BenchError as exc:
            self.stop()
            raise BenchError('%s: %s' % (exc, self._errors())) from None
        self.url = 'http://127.0.0.1:%d' % port
        return self.url

    def _errors(self) -> str:
        stderr = self.process.stderr if self.process is not None else None
        text = stderr.read() if stderr is not None else ''
        return ' '.join(text.split())[-300:] or 'no output'

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process.pid, self.process.pid)
            self.process.wait()
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None


class LatencyProxy:
    """``latency_proxy.py`` in front of a local endpoint: each request reaches it
    ``delay_ms`` later (answers come back at once)."""

    def __init__(self, upstream: str, delay_ms: float, log_path: str):
        self.upstream = upstream
        self.delay_ms = delay_ms
        self.log_path = log_path
        self.process: Optional[subprocess.Popen] = None
        self.url = ''

    def start(self) -> str:
        parsed = urllib.parse.urlsplit(self.upstream)
        if parsed.scheme != 'http' or parsed.hostname not in LOCAL_HOSTS or not parsed.port:
            raise BenchError('--latency-ms with an SQS endpoint needs a local http endpoint with a '
                             'port (the proxy connects to 127.0.0.1), not %s' % self.upstream)
        port = free_port()
        with open(self.log_path, 'w') as log:
            self.process = subprocess.Popen(
                [sys.executable, '-m', 'bench.proxy', str(port), str(parsed.port),
                 '%g' % self.delay_ms], stdout=log, stderr=subprocess.STDOUT,
                cwd=REPOSITORY, start_new_session=True)
        try:
            wait_for_port(port, self.process.pid, 'the latency proxy')
        except BenchError as exc:
            self.stop()
            with open(self.log_path) as log:
                raise BenchError('%s: %s' % (exc, ' '.join(log.read().split())[-300:])) from None
        self.url = 'http://127.0.0.1:%d' % port
        return self.url

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process.pid, self.process.pid)
            self.process.wait()
            self.process = None


class Endpoint:
    """The SQS endpoint of a benchmark: ``moto`` (embedded, the default),
    ``fauxqs``, or ``url`` (one already running)."""

    def __init__(self, kind: str = 'moto', url: str = '', cwd: Optional[str] = None):
        self.kind = kind
        self.url = url
        self.cwd = cwd
        self._moto: Optional[SQSLocalProcess] = None
        self._fauxqs: Optional[Fauxqs] = None

    def describe(self) -> str:
        return {'moto': 'embedded moto', 'fauxqs': 'fauxqs'}.get(self.kind, 'given')

    def start(self) -> 'Endpoint':
        if self.kind == 'moto':
            self._moto = SQSLocalProcess(cwd=self.cwd)
            self.url = self._moto.url
        elif self.kind == 'fauxqs':
            self._fauxqs = Fauxqs()
            self.url = self._fauxqs.start()
        return self

    def stop(self) -> None:
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self._fauxqs is not None:
            self._fauxqs.stop()
            self._fauxqs = None
