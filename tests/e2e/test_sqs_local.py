"""`kale sqs-local`: starts, answers boto3, stops cleanly; clear errors otherwise."""
import signal
import socket
import subprocess
import sys

import pytest

from kale.cli.sqs_local import SQSLocalProcess
from tests.support.endpoint import ROOT, raw_client, subprocess_env


def test_it_starts_answers_boto3_and_stops_on_sigterm():
    endpoint = SQSLocalProcess(env=subprocess_env(), cwd=ROOT)
    try:
        client = raw_client(endpoint.url)
        url = client.create_queue(QueueName='hello')['QueueUrl']
        client.send_message(QueueUrl=url, MessageBody='hi')
        [message] = client.receive_message(QueueUrl=url)['Messages']
        assert message['Body'] == 'hi'
    finally:
        endpoint.process.send_signal(signal.SIGTERM)
        code = endpoint.process.wait(60)
        endpoint.stop()
    assert code == 0
    assert 'stopped' in ''.join(endpoint.lines)


def test_ctrl_c_stops_it_cleanly():
    endpoint = SQSLocalProcess(env=subprocess_env(), cwd=ROOT)
    endpoint.process.send_signal(signal.SIGINT)
    assert endpoint.process.wait(60) == 0
    endpoint.stop()


def run_kale(*args, env=None):
    return subprocess.run([sys.executable, '-m', 'kale', *args], capture_output=True, text=True,
                          cwd=ROOT, env=env or subprocess_env(), timeout=60)


def test_a_taken_port_is_a_one_line_error():
    with socket.socket() as holder:
        holder.bind(('127.0.0.1', 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_kale('sqs-local', '--port', str(port))
    assert result.returncode == 1
    assert result.stderr.strip() == ('kale: error: port %d on 127.0.0.1 is already in use; stop '
                                     'what holds it or pick another with --port' % port)


def test_missing_local_extra_is_a_one_line_error(tmp_path):
    fake = tmp_path / 'moto'
    fake.mkdir()
    (fake / '__init__.py').write_text("raise ImportError('No module named moto')\n")
    env = subprocess_env()
    env['PYTHONPATH'] = str(tmp_path) + ':' + env['PYTHONPATH']
    result = run_kale('sqs-local', '--port', '0', env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'kale-sqs[local]' (in a checkout: pip install -e '.[local]')" in lines[0]


@pytest.mark.slow
def test_two_signals_at_once_still_stop_it():
    for _ in range(4):
        endpoint = SQSLocalProcess(env=subprocess_env(), cwd=ROOT)
        endpoint.process.send_signal(signal.SIGTERM)
        endpoint.process.send_signal(signal.SIGTERM)
        assert endpoint.process.wait(60) == 0
        endpoint.stop()


def test_a_message_goes_to_one_receiver_even_when_receives_overlap(monkeypatch):
    """moto checks that a message is visible, then marks it received; here that
    gap is widened, so without the embedded endpoint's lock two receivers
    running at once would both take every message."""
    import threading
    import time

    from moto.sqs import models

    from kale.cli.sqs_local import LocalSQS

    mark_received = models.Message.mark_received

    def slow_mark_received(self, *args, **kwargs):
        time.sleep(0.02)
        return mark_received(self, *args, **kwargs)

    monkeypatch.setattr(models.Message, 'mark_received', slow_mark_received)
    server = LocalSQS(port=0)
    client = raw_client(server.start())
    try:
        url = client.create_queue(QueueName='overlap')['QueueUrl']
        client.send_message_batch(QueueUrl=url, Entries=[
            {'Id': str(i), 'MessageBody': 'm%d' % i} for i in range(4)])
        received: list[str] = []

        def receive():
            answer = client.receive_message(QueueUrl=url, MaxNumberOfMessages=4)
            received.extend(m['MessageId'] for m in answer.get('Messages', []))

        threads = [threading.Thread(target=receive) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(received) == len(set(received)) == 4
    finally:
        server.stop()
