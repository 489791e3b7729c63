"""``kale sqs-local``: the embedded SQS-compatible endpoint (moto, or
``--engine fauxqs``), and :class:`SQSLocalProcess`, that command in a child
process. See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import argparse
import errno
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Mapping, Optional

from kale.cli.options import arg, command, flag, port_number
from kale.exceptions import ImproperlyConfigured, PortInUseError
from kale.transport.endpoint import is_loopback_host

DEFAULT_HOST = '127.0.0.1'
DEFAULT_PORT = 9324
ANNOUNCEMENT = re.compile(r'SQS endpoint at (http://\S+)')


def _check_port(host: str, port: int) -> None:
    if port == 0:
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError('port %d on %s is already in use; stop what holds it or pick '
                                 'another with --port' % (port, host)) from None
        raise PortInUseError('cannot listen on %s:%d: %s' % (host, port, exc.strerror)) from None
    finally:
        probe.close()


def _moto_server_class() -> Any:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise ImproperlyConfigured(
            "the embedded endpoint needs moto's server, which is not installed (%s): "
            "pip install 'kale-sqs[local]' (in a checkout: pip install -e '.[local]')" % exc
        ) from None
    _serialize_receives()
    return ThreadedMotoServer


_receive_lock = threading.Lock()


def _serialize_receives() -> None:
    """Make each receive atomic, as on SQS.

    moto's server answers requests on several threads, and its receive checks
    that a message is visible (and, on a FIFO queue, that its group is not in
    flight) before it marks the message received. Two workers receiving at
    once could both take one message, or take two messages of one group and
    run them out of order. Here a receive takes its messages under one lock,
    and a long poll waits outside it and tries again.
    """
    from moto.sqs.models import SQSBackend
    receive = SQSBackend.receive_message
    if getattr(receive, 'kale_atomic', False):
        return

    def receive_message(self: Any, queue_name: str, count: int, wait_seconds_timeout: int,
                        visibility_timeout: int, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        end = time.monotonic() + wait_seconds_timeout
        while True:
            with _receive_lock:
                found = receive(self, queue_name, count, 0, visibility_timeout, *args, **kwargs)
            left = end - time.monotonic()
            if found or left <= 0:
                return found
            if queue.fifo_queue:
                time.sleep(min(left, 0.05))   # visible messages may all be in held groups
            else:
                queue.wait_for_messages(min(left, 1.0))

    receive_message.kale_atomic = True            # type: ignore[attr-defined]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]


class _Endpoint:
    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (self.host, self.port)


class LocalSQS(_Endpoint):
    """A moto server in a background thread: ``start()``, ``url``, ``stop()``."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, verbose: bool = False):
        super().__init__(host, port)
        self.verbose = verbose
        self._server: Any = None

    def start(self) -> str:
        server_class = _moto_server_class()
        _check_port(self.host, self.port)
        if not self.verbose:
            logging.getLogger('werkzeug').setLevel(logging.ERROR)
        self._server = server_class(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class FauxqsServer(_Endpoint):
    """fauxqs in a child process (see :mod:`kale.fauxqs`): ``start()``,
    ``url``, ``running``, ``stop()``."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        super().__init__(host, port)
        self._process: Optional[subprocess.Popen] = None

    def start(self) -> str:
        from kale import fauxqs
        _check_port(self.host, self.port)
        if self.port == 0:
            self.port = _free_port(self.host)
        self._process = fauxqs.start(self.port, host=self.host)
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while not _answers(self.host, self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                errors = self._process.stderr.read() if self._process.stderr else ''
                self.stop()
                raise fauxqs.FauxqsError('fauxqs did not start on %s:%d: %s' % (
                    self.host, self.port, ' '.join(errors.split())[-300:] or 'no output'))
            time.sleep(0.05)
        return self.url

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM to fauxqs (its own session), SIGKILL if it does not end."""
        process, self._process = self._process, None
        if process is not None:
            _end(process, STOP_TIMEOUT_SEC)
            if process.stderr is not None:
                process.stderr.close()


#: Seconds fauxqs may take to answer after it is started (installed already).
START_TIMEOUT_SEC = 30.0
#: Seconds fauxqs may take to stop after SIGTERM.
STOP_TIMEOUT_SEC = 10.0
#: The engines ``--engine`` names.
ENGINES = ('moto', 'fauxqs')


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _end(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to ``process`` if it runs, SIGKILL if it has not ended ``timeout`` seconds later."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, verbose: bool = False,
          announce: Callable[[str], None] = print, engine: str = 'moto') -> None:
    """Run the endpoint until SIGTERM or SIGINT (Ctrl-C), then stop it cleanly
    (with ``engine='fauxqs'``, its Node.js process too)."""
    # A plain flag, not a threading.Event: a second signal arriving while the
    # handler is inside Event.set() would block forever on the Event's lock.
    stopping: list[int] = []

    def on_signal(signum: int, frame: Optional[Any]) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    server: Any = FauxqsServer(host, port) if engine == 'fauxqs' else LocalSQS(host, port, verbose)
    try:
        url = server.start()
        announce('kale sqs-local: SQS endpoint at %s (%s; queues live in memory; Ctrl-C stops it)'
                 % (url, engine))
        while not stopping:
            if engine == 'fauxqs' and not server.running:
                raise ImproperlyConfigured('fauxqs stopped on its own')
            time.sleep(0.2)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    announce('kale sqs-local: stopped')


def cmd_sqs_local(args: argparse.Namespace) -> int:
    if not is_loopback_host(args.host):
        print('kale sqs-local: warning: listening on %s, not on this machine only: anyone who '
              'can reach it can read, fill and purge its queues, with no credentials'
              % args.host, file=sys.stderr, flush=True)
    serve(args.host, args.port, verbose=args.verbose,
          announce=lambda line: print(line, flush=True), engine=args.engine)
    return 0


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    command(commands, 'sqs-local', cmd_sqs_local,
            'run an embedded SQS-compatible endpoint (moto or fauxqs) for development',
            "Run an SQS-compatible server (with S3 and SNS) on this machine until Ctrl-C or "
            "SIGTERM. Queues live in memory. The default engine, moto, needs the 'local' extra: "
            "pip install 'kale-sqs[local]' (in a checkout: pip install -e '.[local]'); it serves "
            "a few dozen tasks a second. --engine fauxqs serves thousands: it needs Node.js 20 "
            "or later with npm, and installs the pinned fauxqs from npm into a cache the first "
            "time.",
            arg('--engine', choices=ENGINES, default='moto',
                help='moto (default: pip only) or fauxqs (fast: Node.js and npm)'),
            arg('--host', default=DEFAULT_HOST, help='address to listen on (default %(default)s)'),
            arg('--port', type=port_number, default=DEFAULT_PORT,
                help="port to listen on (default %(default)s, ElasticMQ's; 0 picks a free one)"),
            flag('--verbose', 'log every request'))


class SQSLocalProcess:
    """``kale sqs-local --port 0`` in a child process; :attr:`url` once it answers.

    Its output is kept in :attr:`lines`. :meth:`stop` ends it (SIGTERM, then
    SIGKILL after ``timeout`` seconds) and returns its exit code.
    """

    def __init__(self, *extra_args: str, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, start_timeout: float = 30.0,
                 new_session: bool = False):
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'kale', 'sqs-local', '--port', '0', *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
            env=dict(env) if env is not None else None, start_new_session=new_session)
        self.lines: list[str] = []
        self.url = self._wait_for_url(start_timeout)
        self._reader = threading.Thread(target=self.lines.extend, args=(self.process.stdout,),
                                        daemon=True)
        self._reader.start()

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = ANNOUNCEMENT.search(line)
            if match:
                return match.group(1)
        self.process.kill()
        self.process.wait()
        raise ImproperlyConfigured('kale sqs-local did not start: %s'
                                   % ''.join(self.lines).strip()[-500:])

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> int:
        _end(self.process, timeout)
        self._reader.join(5)
        return self.process.returncode
