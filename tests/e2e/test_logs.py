"""Logging: the AWS libraries stay quiet unless asked, and never print secrets."""
import io
import logging
import os
import subprocess
import sys

import pytest

from kale import logs
from kale.conf import settings
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


@pytest.mark.parametrize('line', [
    "{'Authorization': b'AWS4-HMAC-SHA256 Credential=AKIAXX/20261122/us-east-1/sqs/aws4_request, "
    "SignedHeaders=host, Signature=abcdef0123', 'X-Amz-Security-Token': b'TOKEN'}",
    'x-amz-security-token:TOKEN\nhost:sqs.amazonaws.com',
    '{"QueueUrl": "u", "MessageBody": "kale2:i=1:sig:SECRETDATA", "DelaySeconds": 0}',
    "{'MessageBody': 'SECRETDATA', 'QueueUrl': 'u'}",
    '{"Messages":[{"Body":"SECRETDATA","MessageId":"m"}]}',
    'https://sqs/?X-Amz-Credential=AKIAXX%2F2026&X-Amz-Signature=abc',
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
        process.terminate()
        process.wait(10)
    assert warning.startswith('kale sqs-local: warning: listening on 0.0.0.0, not on this '
                              'machine only')
