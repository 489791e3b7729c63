"""Settings: read on first use from KALE_SETTINGS_MODULE over the defaults."""
import os
import re
import subprocess
import sys

import pytest

from kale import default_settings
from kale.conf import ENVIRONMENT_VARIABLE, import_string, resolve_callable, settings
from kale.exceptions import ImproperlyConfigured
from kale.transport import sqs
from tests.support.endpoint import ROOT


def write_module(tmp_path, name, text):
    (tmp_path / (name + '.py')).write_text(text)


def test_settings_module_overrides_defaults():
    assert settings.QUEUE_CONFIG.endswith(os.path.join('tests', 'queue_config.yaml'))
    assert settings.SQS_TASK_SIZE_LIMIT == default_settings.SQS_TASK_SIZE_LIMIT


def test_importing_kale_does_not_read_settings():
    code = 'import kale, kale.task, kale.publisher, kale.message; print("imported")'
    env = dict(os.environ, **{ENVIRONMENT_VARIABLE: 'no_such_settings_module'})
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert 'imported' in result.stdout


def test_missing_settings_module_is_a_clear_error(monkeypatch, settings_env):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'no_such_settings_module')
    settings_env()
    with pytest.raises(ImproperlyConfigured, match="KALE_SETTINGS_MODULE 'no_such_settings_module' "
                                                   'cannot be imported'):
        settings.QUEUE_CONFIG


def test_broken_settings_module_is_a_clear_error(monkeypatch, tmp_path, settings_env):
    write_module(tmp_path, 'broken_kale_settings', 'QUEUE_CONFIG = "x"\n1 / 0\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'broken_kale_settings')
    settings_env()
    with pytest.raises(ImproperlyConfigured, match='broken_kale_settings.*ZeroDivisionError'):
        settings.QUEUE_CONFIG


def test_settings_are_read_when_first_used_not_frozen(monkeypatch, tmp_path, settings_env):
    write_module(tmp_path, 'first_kale_settings', 'QUEUE_PREFIX = "first-"\n')
    write_module(tmp_path, 'second_kale_settings', 'QUEUE_PREFIX = "second-"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'first_kale_settings')
    settings_env()
    assert settings.QUEUE_PREFIX == 'first-'
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'second_kale_settings')
    settings_env()
    assert settings.QUEUE_PREFIX == 'second-'


def test_lowercase_names_in_settings_module_are_ignored(monkeypatch, tmp_path, settings_env):
    write_module(tmp_path, 'lower_kale_settings', 'queue_prefix = "nope"\nimport os\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'lower_kale_settings')
    settings_env()
    assert settings.QUEUE_PREFIX == ''
    with pytest.raises(AttributeError):
        settings.queue_prefix


def test_without_a_settings_module_the_defaults_apply(monkeypatch, settings_env):
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    settings_env()
    assert settings.module_name is None
    assert settings.QUEUE_CONFIG == 'queue_config.yaml'


def test_unknown_setting_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no setting 'NO_SUCH_SETTING'"):
        settings.NO_SUCH_SETTING


def test_override_applies_inside_the_block_only():
    from kale.app import default_app
    before, app = settings.config, default_app()
    with settings.override(QUEUE_PREFIX='over-'):
        assert settings.QUEUE_PREFIX == 'over-' == default_app().config.QUEUE_PREFIX
        assert settings.config is not before and default_app() is not app
    assert settings.QUEUE_PREFIX == '' and settings.config is before and default_app() is app


def test_endpoint_url_setting_wins():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://example:1', MESSAGE_QUEUE_USE_PROXY=True):
        assert sqs.endpoint_url(settings.config) == 'http://example:1'


def test_proxy_settings_are_honoured():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='', MESSAGE_QUEUE_USE_PROXY=True,
                           MESSAGE_QUEUE_PROXY_HOST='elasticmq', MESSAGE_QUEUE_PROXY_PORT=9324):
        assert sqs.endpoint_url(settings.config) == 'http://elasticmq:9324'
        assert sqs.make_client(config=settings.config).meta.endpoint_url == 'http://elasticmq:9324'


def test_no_endpoint_and_no_proxy_means_aws():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='', MESSAGE_QUEUE_USE_PROXY=False,
                           AWS_REGION='eu-west-1'):
        assert sqs.endpoint_url(settings.config) == ''
        assert 'eu-west-1' in sqs.make_client(config=settings.config).meta.endpoint_url


def test_proxy_without_host_is_a_clear_error():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='', MESSAGE_QUEUE_USE_PROXY=True,
                           MESSAGE_QUEUE_PROXY_HOST=''):
        with pytest.raises(ImproperlyConfigured, match='MESSAGE_QUEUE_PROXY_HOST'):
            sqs.endpoint_url(settings.config)


def test_no_region_for_aws_is_a_clear_error(monkeypatch):
    monkeypatch.delenv('AWS_DEFAULT_REGION', raising=False)
    monkeypatch.delenv('AWS_REGION', raising=False)
    monkeypatch.setenv('AWS_CONFIG_FILE', '/nonexistent')
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='', AWS_REGION=''):
        with pytest.raises(ImproperlyConfigured, match='no AWS region'):
            sqs.make_client(config=settings.config)


def test_the_defaults_module_names_every_setting_of_the_table_and_nothing_else():
    names = {name for name in dir(default_settings) if re.fullmatch(r'[A-Z][A-Z0-9_]*', name)}
    assert names - {'TABLE', 'WORKER_POOLS', 'TASK_ISOLATION_MODES', 'BOOL', 'TEXT', 'KEY',
                    'KEYS'} == set(default_settings.TABLE)
    assert default_settings.QUEUE_SELECTOR == 'kale.queue_selector.ReducedLottery'


def test_import_string_names_the_setting_on_failure():
    with pytest.raises(ImproperlyConfigured, match="QUEUE_SELECTOR 'nope.Nothing' cannot be imported"):
        import_string('nope.Nothing', 'QUEUE_SELECTOR')
    with pytest.raises(ImproperlyConfigured, match='not a dotted path'):
        import_string('Nothing', 'QUEUE_SELECTOR')


def test_resolve_callable_accepts_paths_and_callables():
    assert resolve_callable('os.getcwd', 'ON_WORKER_STARTUP') is os.getcwd
    assert resolve_callable(None, 'ON_WORKER_STARTUP') is None
    with pytest.raises(ImproperlyConfigured, match='ON_WORKER_STARTUP must be a callable'):
        resolve_callable(42, 'ON_WORKER_STARTUP')
