"""The ready settings modules in settings/ load and point where they say."""
import os
import subprocess
import sys

import pytest
import yaml

from kale.codec import encode
from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.exceptions import ImproperlyConfigured
from kale.message import Message
from kale.transport import sqs
from tests.support.endpoint import ROOT


def use(settings_env, monkeypatch, module, **env):
    # The presets read the environment when imported; import them afresh here.
    for name in [m for m in sys.modules if m.startswith('kale.presets.')]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, module)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings_env()


def test_local_settings_use_the_embedded_endpoint_and_a_named_dev_key(monkeypatch, settings_env):
    monkeypatch.delenv('KALE_SQS_ENDPOINT', raising=False)
    use(settings_env, monkeypatch, 'settings.local')
    assert sqs.endpoint_url(settings.config) == 'http://127.0.0.1:9324'
    assert 'development' in settings.MESSAGE_SIGNING_KEY
    assert os.path.exists(settings.QUEUE_CONFIG)


def test_elasticmq_settings_use_the_proxy_settings(monkeypatch, settings_env):
    use(settings_env, monkeypatch, 'settings.elasticmq')
    assert sqs.endpoint_url(settings.config) == 'http://127.0.0.1:9324'
    encode(Message('id', 'tests.tasks.AddTask'), 'default')     # the key is usable


def test_aws_settings_refuse_to_start_without_a_signing_key(monkeypatch, settings_env):
    monkeypatch.delenv('KALE_SIGNING_KEY', raising=False)
    use(settings_env, monkeypatch, 'settings.aws')
    with pytest.raises(ImproperlyConfigured, match='KALE_SIGNING_KEY is not set'):
        settings.QUEUE_PREFIX


def test_aws_settings_come_from_the_environment(monkeypatch, settings_env):
    use(settings_env, monkeypatch, 'settings.aws', KALE_SIGNING_KEY='k' * 32, AWS_REGION='eu-central-1',
        KALE_QUEUE_PREFIX='prod-', KALE_SIGNING_OLD_KEYS='o' * 32 + ',' + 'p' * 32)
    assert settings.QUEUE_PREFIX == 'prod-'
    assert settings.MESSAGE_SIGNING_OLD_KEYS == ('o' * 32, 'p' * 32)
    monkeypatch.delenv('KALE_SQS_ENDPOINT', raising=False)
    settings_env()
    assert 'eu-central-1' in sqs.make_client(config=settings.config).meta.endpoint_url


def test_worker_without_aws_key_is_a_one_line_error():
    env = {k: v for k, v in os.environ.items() if k not in ('KALE_SIGNING_KEY',)}
    env[ENVIRONMENT_VARIABLE] = 'settings.aws'
    env['AWS_REGION'] = 'us-east-1'
    result = subprocess.run([sys.executable, '-m', 'kale', 'worker'], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        'kale: error: settings module settings.aws: KALE_SIGNING_KEY is not set: '
        'kale.presets.aws takes the message signing key from it; make one with '
        '`python -c "import secrets; '
        'print(secrets.token_hex(32))"`']


def test_docker_compose_runs_elasticmq_on_the_settings_port():
    with open(os.path.join(ROOT, 'example', 'docker-compose.yml')) as f:
        compose = yaml.safe_load(f)
    service = compose['services']['elasticmq']
    assert 'elasticmq' in service['image']
    assert '127.0.0.1:9324:9324' in service['ports']       # this machine only
