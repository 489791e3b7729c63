"""KALE_TEST_SQS_ENDPOINT aims the suite's tests that need an SQS endpoint at
one already running (LocalStack, say; here a `kale sqs-local` of the test's
own stands in for it) instead of the embedded one a session starts."""
import socket
import subprocess
import sys

import pytest

from kale.cli.sqs_local import SQSLocalProcess
from tests.support.endpoint import ENDPOINT_VARIABLE, ROOT, given_endpoint, raw_client, subprocess_env

pytestmark = pytest.mark.slow

#: One test of the transport contract on the SQS endpoint.
CONTRACT_TEST = ('tests/integration/test_transport_contract.py::'
                 'test_fifo_groups_do_not_wait_for_each_other[sqs]')


def run_suite(endpoint: str) -> subprocess.CompletedProcess:
    """The contract test in a pytest of its own, with the variable set; no
    short summary, whose lines repeat the error cut to the terminal's width."""
    return subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-rN', '-p', 'no:cacheprovider', CONTRACT_TEST],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
        env=subprocess_env(**{ENDPOINT_VARIABLE: endpoint}))


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (just freed)."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return int(probe.getsockname()[1])


def test_the_contract_suite_runs_against_the_endpoint_the_variable_names():
    endpoint = SQSLocalProcess(env=subprocess_env(), cwd=ROOT)
    try:
        client = raw_client(endpoint.url)
        before = client.list_queues().get('QueueUrls', [])
        result = run_suite(endpoint.url + '/')
        assert result.returncode == 0, result.stdout + result.stderr
        assert '1 passed' in result.stdout
        made = [url for url in client.list_queues().get('QueueUrls', []) if url not in before]
        assert made and all('/contract-' in url and url.endswith('q.fifo') for url in made), made
    finally:
        endpoint.stop()


def test_an_endpoint_that_does_not_answer_fails_the_tests_in_one_line():
    url = 'http://127.0.0.1:%d' % closed_port()
    result = run_suite(url)
    assert result.returncode == 1, result.stdout
    said = [line for line in result.stdout.splitlines() if ENDPOINT_VARIABLE in line]
    assert len(said) == 1 and said[0].startswith(
        '%s=%s: the endpoint does not answer an SQS request: ' % (ENDPOINT_VARIABLE, url)), \
        result.stdout


@pytest.mark.parametrize('bad', ['127.0.0.1:4566', 'http://127.0.0.1', 'ftp://h:1',
                                 'http://127.0.0.1:4566/queue', 'http://h:port'])
def test_a_value_that_is_not_an_endpoint_is_named_in_one_line(bad):
    with pytest.raises(ValueError) as raised:
        given_endpoint(bad)
    assert str(raised.value) == ('KALE_TEST_SQS_ENDPOINT must be an endpoint such as '
                                 'http://127.0.0.1:4566, got %r' % bad)
