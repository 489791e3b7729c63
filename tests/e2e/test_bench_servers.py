"""The benchmark's own latency proxy and fauxqs installer (bench/proxy.py,
bench/fauxqs.py): no tool from outside the repository."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from bench import fauxqs
from bench.servers import LatencyProxy, free_port, wait_for_port
from tests.support.endpoint import ROOT
from tests.support.unavailable import unavailable


def echo_server():
    """A TCP server on 127.0.0.1 that sends back what it receives; returns its port."""
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen()

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn):
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def round_trip(port, payload):
    with socket.create_connection(('127.0.0.1', port)) as conn:
        started = time.perf_counter()
        conn.sendall(payload)
        got = b''
        while len(got) < len(payload):
            got += conn.recv(65536)
        return time.perf_counter() - started, got


def test_the_proxy_forwards_every_byte_each_request_delay_ms_later(tmp_path):
    listener = echo_server()
    upstream = listener.getsockname()[1]
    proxy = LatencyProxy('http://127.0.0.1:%d' % upstream, 150, str(tmp_path / 'proxy.log'))
    try:
        port = int(proxy.start().rsplit(':', 1)[1])
        payload = os.urandom(300_000)
        direct, _ = round_trip(upstream, b'x')
        through, got = round_trip(port, payload)
        assert got == payload
        assert through >= 0.15 > direct
        second, _ = round_trip(port, b'y' * 10)           # one delay a request, not cumulative
        assert 0.15 <= second < 0.15 + 0.25
    finally:
        proxy.stop()
        listener.close()


def test_the_proxy_refuses_bad_arguments_in_one_line():
    done = subprocess.run([sys.executable, '-m', 'bench.proxy', '80', 'x', '10'], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == 'bench.proxy: ports must be integers and DELAY_MS a number, ' \
                                  'got 80 x 10'


def test_fauxqs_without_node_or_npm_is_one_line_naming_them(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))                # neither node nor npm
    with pytest.raises(fauxqs.FauxqsError, match=r'^fauxqs needs Node.js 20 or later '
                                                 r'with npm on PATH \(found neither node nor '
                                                 r'npm\)$'):
        fauxqs.install(str(tmp_path / 'cache'))


def test_fauxqs_is_pinned_by_the_repository_lock_file():
    import json
    with open(os.path.join(fauxqs.HERE, 'package.json')) as f:
        wanted = json.load(f)['dependencies']['fauxqs']
    with open(os.path.join(fauxqs.HERE, 'package-lock.json')) as f:
        locked = json.load(f)['packages']['node_modules/fauxqs']['version']
    assert wanted == locked and wanted[0].isdigit()           # an exact version, not a range
    assert fauxqs.install_command('npm')[:2] == ['npm', 'ci']  # installs the lock, nothing newer


@pytest.mark.slow
def test_fauxqs_installs_from_npm_and_serves_sqs_on_loopback(tmp_path, monkeypatch):
    if shutil.which('npm') is None:
        unavailable('npm is not installed: fauxqs is installed with it')
    from tests.support.endpoint import raw_client
    monkeypatch.setenv('KALE_FAUXQS_CACHE', str(tmp_path / 'cache'))
    port = free_port()
    try:
        server = fauxqs.start(port)
    except fauxqs.FauxqsError as exc:
        unavailable('fauxqs cannot be installed or started (is the npm registry reachable?): %s'
                    % exc)
    try:
        wait_for_port(port, server.pid, 'fauxqs')
        client = raw_client('http://127.0.0.1:%d' % port)
        url = client.create_queue(QueueName='bench-check')['QueueUrl']
        client.send_message(QueueUrl=url, MessageBody='hello')
        [message] = client.receive_message(QueueUrl=url)['Messages']
        assert message['Body'] == 'hello'
    finally:
        server.terminate()
        server.wait(60)


def test_the_memory_transport_baseline_is_not_called_boto3():
    from bench import report
    figure = {'kale': {'median': 2.0, 'min': 2.0, 'max': 2.0},
              'baseline': {'median': 1.0, 'min': 1.0, 'max': 1.0}, 'ratio': 2.0}
    results = {report.DRAIN: figure}
    memory = report.summary([{'label': 'x', 'transport': 'memory', 'results': results}])
    assert 'drain: raw memory-transport loop' in memory and 'boto3' not in memory
    assert 'memory-transport loop' in report.table(results, 'memory')
    sqs = report.summary([{'label': 'x', 'transport': 'sqs', 'results': results}])
    assert 'drain: raw boto3 loop' in sqs
