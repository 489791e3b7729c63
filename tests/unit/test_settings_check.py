"""Wrong setting values are refused when the settings are read, naming the setting."""
import pytest

from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.default_settings import TABLE
from kale.exceptions import ImproperlyConfigured


@pytest.mark.parametrize('name,value,problem', [
    ('DIE_ON_RESIDENT_SET_SIZE_MB', 'abc', 'must be a number'),
    ('SQS_ERROR_MAX_BACKOFF_SEC', '30', 'must be a number'),
    ('MAX_RECEIVE_COUNT', 'ten', 'must be a whole number'),
    ('MAX_RECEIVE_COUNT', 0, 'must be a whole number from 1 to 1000'),
    ('TASK_MAPPER', ['a', 'b'], 'must be a dict'),
    ('SQS_READ_TIMEOUT_SEC', '30', 'must be a number'),
    ('RETRY_DELAY_JITTER', 2, 'must be a number from 0 to 1'),
    ('TASK_ISOLATION', 'thread', "must be one of 'none', 'process'"),
    ('MESSAGE_QUEUE_PROXY_PORT', 70000, 'must be a port number'),
    ('SQS_TASK_SIZE_LIMIT', True, 'must be a whole number'),
    ('METRICS_PORT', 70000, 'must be a whole number from 0 to 65535'),
    ('LOG_FORMAT', 'xml', "must be one of 'text', 'json'"),
    ('TRACING', 'yes', 'must be True or False'),
    ('RATE_LIMIT_URL', 'redis://localhost:6379/0', 'Redis is not supported: flow control keeps'),
    ('RATE_LIMIT_URL', 'mysql://db/flow', "must be a URL like 'sqlite:///records.db'"),
])
def test_a_wrong_value_is_one_clear_error(name, value, problem):
    with pytest.raises(ImproperlyConfigured, match=r'^setting %s %s.*, got' % (name, problem)):
        with settings.override(**{name: value}):
            pass


def test_a_settings_module_with_a_wrong_value_fails_when_read(monkeypatch, tmp_path, settings_env):
    (tmp_path / 'wrong_kale_settings.py').write_text('MAX_RECEIVE_COUNT = "many"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, 'wrong_kale_settings')
    settings_env()
    with pytest.raises(ImproperlyConfigured, match="setting MAX_RECEIVE_COUNT must be a whole"):
        settings.QUEUE_PREFIX


def test_the_defaults_pass_their_own_checks(monkeypatch, settings_env):
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    settings_env()
    settings.load()                                   # reading them runs every check
    assert settings.module_name is None               # nothing but the defaults
    problems = {name: field.metadata['check'](getattr(settings, name))
                for name, field in TABLE.items()}
    assert {name: problem for name, problem in problems.items() if problem} == {}
