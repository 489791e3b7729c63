"""Logging: the AWS libraries stay quiet unless asked, and never print secrets."""
import io
import logging
import os
import re
import subprocess
import sys

import pytest

from kale import logs
from kale.conf import settings
from kale.transport import OutgoingMessage
from kale.transport.sqs import SQSTransport
from tests import tasks
from tests.support.endpoint import ROOT, subprocess_env

SESSION_TOKEN = 'FQoGZXIvYXdzSESSIONTOKEN1234567890'
ACCESS_KEY = 'AKIAKALETESTACCESSID'


@pytest.fixture
def log_output():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    yield lambda level, aws_level: logs.configure(level, aws_level, handler) and stream
    logging.getLogger().removeHandler(handler)
    logs.configure('WARNING', 'WARNING', logging.NullHandler())


def test_the_log_level_leaves_the_aws_libraries_at_warning(log_output):
    log_output('DEBUG', 'WARNING')
    assert logging.getLogger('kale').getEffectiveLevel() == logging.DEBUG
    for name in ('botocore', 'boto3', 'urllib3'):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING


def test_even_at_debug_no_credential_token_or_argument_is_logged(sqs, log_output):
    stream = log_output('DEBUG', 'DEBUG')
    with settings.override(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SESSION_TOKEN=SESSION_TOKEN,
                           SERIALIZER='json'):
        tasks.EchoTask.publish(None, 'card-4111-1111-1111-1111', email='someone@example.com')
    text = stream.getvalue()
    assert 'botocore' in text and logs.REDACTED in text        # the AWS libraries did log
    for secret in (SESSION_TOKEN, ACCESS_KEY, '4111-1111', 'someone@example.com'):
        assert secret not in text


@pytest.fixture
def plain_debug_logging():
    """What ``logging.basicConfig(level=logging.DEBUG)`` gives a fresh process:
    a plain handler on the root logger, at DEBUG, and the AWS libraries'
    loggers at NOTSET (no level of their own). No filter of Kale's."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ('', *logs.AWS_LOGGERS)}
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    for name in logs.AWS_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield stream
    root.removeHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def signed_requests(direct):
    """Make real signed requests (queue, send, receive, delete) with a Kale
    transport under the credentials above; what they carried that must not
    be logged: the access key id, each request's signature, the token."""
    with settings.override(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SESSION_TOKEN=SESSION_TOKEN,
                           SQS_DIRECT_REQUESTS=direct):
        transport = SQSTransport(config=settings.config)
    authorizations = []
    transport.client.meta.events.register('before-send.sqs', lambda request, **kwargs: (
        authorizations.append(request.headers['Authorization'])))
    queue = settings.config.QUEUE_PREFIX + 'signed'
    transport.ensure_queue(queue, 30, None, 0)
    transport.send(queue, OutgoingMessage('body'))
    received = []
    while not received:
        received = transport.receive(queue, 10, 0, 30)
    assert transport.delete_batch(queue, [m.receipt_handle for m in received]) == []
    text = ' '.join(a.decode() if isinstance(a, bytes) else a for a in authorizations)
    assert set(re.findall(r'Credential=(\w+)/', text)) == {ACCESS_KEY}
    signatures = re.findall(r'Signature=([0-9a-f]{64})', text)
    assert len(signatures) == len(authorizations) >= 5
    return [ACCESS_KEY, SESSION_TOKEN, *signatures]


@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_at_debug_kales_logging_shows_no_access_key_signature_or_token(sqs, log_output,
                                                                       direct):
    stream = log_output('DEBUG', 'DEBUG')
    secrets = signed_requests(direct)
    text = stream.getvalue()
    assert 'Signature:' in text and 'Sending http request' in text     # botocore did log
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize('direct', [True, False], ids=['direct', 'botocore'])
def test_a_plain_basic_config_at_debug_shows_none_of_them_either(sqs, plain_debug_logging,
                                                                 direct):
    secrets = signed_requests(direct)
    text = plain_debug_logging.getvalue()
    assert 'Signature:' in text and 'Sending http request' in text and '"POST / HTTP/1.1"' in text
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize('line', [
    "{'Authorization': b'AWS4-HMAC-SHA256 Credential=AKIAXX/20261122/us-east-1/sqs/aws4_request, "
    "SignedHeaders=host, Signature=abcdef0123', 'X-Amz-Security-Token': b'TOKEN'}",
    'x-amz-security-token:TOKEN\nhost:sqs.amazonaws.com',
    '{"QueueUrl": "u", "MessageBody": "kale2:i=1:sig:SECRETDATA", "DelaySeconds": 0}',
    "{'MessageBody': 'SECRETDATA', 'QueueUrl': 'u'}",
    '{"Messages":[{"Body":"SECRETDATA","MessageId":"m"}]}',
    'https://sqs/?X-Amz-Credential=AKIAXX%2F2026&X-Amz-Signature=abc',
    'https://s3/k?X-Amz-Security-Token=TOKEN&X-Amz-Date=20261122T000000Z',
    'Signature:\nabcdef0123',
])
def test_redaction_blanks_what_the_aws_libraries_print(line):
    cleaned = logs.redact(line)
    for secret in ('AKIAXX', 'TOKEN', 'abcdef0123', 'SECRETDATA'):
        assert secret not in cleaned
    assert logs.REDACTED in cleaned


def test_a_file_in_the_working_directory_cannot_shadow_an_installed_package(tmp_path, sqs):
    (tmp_path / 'boto3.py').write_text('raise RuntimeError("shadowed")\n')
    kale = os.path.join(os.path.dirname(sys.executable), 'kale')
    env = subprocess_env(KALE_TEST_ENDPOINT=sqs.url, KALE_TEST_PREFIX=sqs.prefix)
    result = subprocess.run([kale, 'queues'], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'QUEUE' in result.stdout


def test_sqs_local_warns_when_it_listens_beyond_this_machine():
    from kale.cli import sqs_local
    assert sqs_local.is_loopback_host('127.0.0.1') and sqs_local.is_loopback_host('localhost')
    assert sqs_local.is_loopback_host('::1')
    assert not sqs_local.is_loopback_host('0.0.0.0')
    process = subprocess.Popen([sys.executable, '-m', 'kale', 'sqs-local', '--host', '0.0.0.0',
                                '--port', '0'], cwd=ROOT, env=subprocess_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        warning = process.stderr.readline()
    finally:
        process.terminate()         # (stopping the endpoint it was starting: slow on a loaded machine)
        process.wait(60)
    assert warning.startswith('kale sqs-local: warning: listening on 0.0.0.0, not on this '
                              'machine only')
