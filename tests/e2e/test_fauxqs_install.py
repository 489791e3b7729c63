"""fauxqs's install with the real npm: processes that start it at once into
one empty cache all get a working fauxqs (they once ran npm ci over one
another and stamped a broken node_modules), and a stamp over a
node_modules that lost a package is seen and the install redone. Each test
has a cache folder of its own, never ~/.cache."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.servers import free_port, wait_for_port
from kale import fauxqs
from tests.support.endpoint import ROOT, raw_client, subprocess_env
from tests.support.unavailable import unavailable

pytestmark = pytest.mark.slow

#: Processes starting at once, as many as `make test` has xdist workers.
AT_ONCE = 6
INSTALL = 'from kale import fauxqs; fauxqs.install()'


@pytest.fixture(autouse=True)
def npm():
    if shutil.which('npm') is None or shutil.which('node') is None:
        unavailable('Node.js with npm is not installed: fauxqs is installed with it')


def missing(folder: str) -> list[str]:
    """The packages of the lock file without their package.json in ``folder``."""
    with open(os.path.join(fauxqs.HERE, 'package-lock.json')) as f:
        packages = json.load(f)['packages']
    return [path for path in packages if path.startswith('node_modules/')
            and not os.path.isfile(os.path.join(folder, path, 'package.json'))]


def serves_sqs(folder: str) -> None:
    """fauxqs from ``folder`` answers SQS calls."""
    port = free_port()
    server = fauxqs.start(port, folder)
    try:
        wait_for_port(port, server.pid, 'fauxqs')
        client = raw_client('http://127.0.0.1:%d' % port)
        url = client.create_queue(QueueName='install-check')['QueueUrl']
        client.send_message(QueueUrl=url, MessageBody='hello')
        [message] = client.receive_message(QueueUrl=url)['Messages']
        assert message['Body'] == 'hello'
    finally:
        server.terminate()
        server.wait(60)
        if server.stderr is not None:
            server.stderr.close()


def test_processes_installing_at_once_into_an_empty_cache_all_get_a_working_fauxqs(tmp_path):
    cache = str(tmp_path / 'cache')
    env = subprocess_env(KALE_FAUXQS_CACHE=cache)
    starting = [subprocess.Popen([sys.executable, '-c', INSTALL], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(AT_ONCE)]
    ended = [process.communicate(timeout=fauxqs.INSTALL_TIMEOUT_SEC) for process in starting]
    failed = [' '.join(err.split())[-300:] for process, (_, err) in zip(starting, ended, strict=True)
              if process.returncode != 0]
    assert failed == []
    assert missing(cache) == []
    assert not [name for name in os.listdir(cache) if name.startswith('.install-')]
    serves_sqs(cache)


def test_a_stamp_over_a_node_modules_that_lost_packages_is_installed_again(tmp_path):
    cache = fauxqs.install(str(tmp_path / 'cache'))
    for package in ('tslib', 'fastify'):          # tslib: the one the issue saw go missing
        shutil.rmtree(os.path.join(cache, 'node_modules', package))
    assert os.path.exists(os.path.join(cache, '.installed'))
    serves_sqs(cache)
    assert missing(cache) == []
