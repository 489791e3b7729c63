"""Queue config: every error names the file, the queue and the field."""
import os
import textwrap

import pytest

from kale.conf import settings
from kale.exceptions import QueueConfigError, UnknownQueueError
from kale.queue_config import build_queue_config, load_queue_config
from tests.support.endpoint import ROOT

GOOD_ENTRY = {'priority': 10, 'batch_size': 5, 'visibility_timeout_sec': 30,
              'long_poll_time_sec': 1, 'num_iterations': 2}


def write_config(tmp_path, text):
    path = tmp_path / 'queues.yaml'
    path.write_text(textwrap.dedent(text))
    return str(path)


def entry_yaml(key='q', **changes):
    fields = dict(GOOD_ENTRY, **changes)
    body = ''.join('  %s: %s\n' % (field, value) for field, value in fields.items()
                   if value is not None)
    return '%s:\n%s' % (key, body)


def load_entry(tmp_path, **changes):
    return load_queue_config(write_config(tmp_path, entry_yaml(**changes)))


def test_a_valid_file_loads_in_order_with_defaults(tmp_path):
    config = load_queue_config(write_config(tmp_path, entry_yaml('b') + entry_yaml('a')))
    assert list(config) == ['b', 'a']
    queue = config['a']
    assert (queue.name, queue.priority, queue.batch_size, queue.visibility_timeout_sec,
            queue.long_poll_time_sec, queue.num_iterations) == ('a', 10, 5, 30, 1, 2)
    assert queue.dead_letter_queue == 'dlq-a'


def test_the_shipped_queue_config_loads():
    config = load_queue_config(os.path.join(ROOT, 'queue_config.yaml'))
    assert [config[name].priority for name in config] == [100, 40, 5]


def test_missing_field(tmp_path):
    with pytest.raises(QueueConfigError, match=r"queues.yaml: queue 'q': missing field 'batch_size'"):
        load_entry(tmp_path, batch_size=None)


def test_wrong_type(tmp_path):
    with pytest.raises(QueueConfigError,
                       match=r"queue 'q': field 'priority' must be an integer, got 'high' \(str\)"):
        load_entry(tmp_path, priority='high')


def test_boolean_is_not_an_integer(tmp_path):
    with pytest.raises(QueueConfigError, match=r"field 'num_iterations' must be an integer"):
        load_entry(tmp_path, num_iterations='true')


@pytest.mark.parametrize('value', [0, 101])
def test_priority_out_of_range(tmp_path, value):
    with pytest.raises(QueueConfigError,
                       match=r"queue 'q': field 'priority' must be 1..100, got %d" % value):
        load_entry(tmp_path, priority=value)


@pytest.mark.parametrize('value', [0, 11])
def test_batch_size_out_of_range(tmp_path, value):
    with pytest.raises(QueueConfigError, match=r"field 'batch_size' must be 1..10, got %d" % value):
        load_entry(tmp_path, batch_size=value)


def test_long_poll_out_of_range(tmp_path):
    with pytest.raises(QueueConfigError, match=r"field 'long_poll_time_sec' must be 0..20, got 21"):
        load_entry(tmp_path, long_poll_time_sec=21)


def test_visibility_timeout_out_of_range(tmp_path):
    with pytest.raises(QueueConfigError,
                       match=r"field 'visibility_timeout_sec' must be 0..43200, got 43201"):
        load_entry(tmp_path, visibility_timeout_sec=43201)


def test_num_iterations_must_be_positive(tmp_path):
    with pytest.raises(QueueConfigError, match=r"field 'num_iterations' must be at least 1, got 0"):
        load_entry(tmp_path, num_iterations=0)


def test_duplicate_queue_names(tmp_path):
    text = entry_yaml('a', name='same') + entry_yaml('b', name='same')
    with pytest.raises(QueueConfigError,
                       match=r"queue 'b': name 'same' is already used by queue 'a'"):
        load_queue_config(write_config(tmp_path, text))


def test_duplicate_keys(tmp_path):
    with pytest.raises(QueueConfigError, match=r"queues.yaml: not valid YAML: duplicate key 'a'"):
        load_queue_config(write_config(tmp_path, entry_yaml('a') + entry_yaml('a')))


def test_unreadable_yaml(tmp_path):
    path = write_config(tmp_path, 'a:\n  priority: [1\n')
    with pytest.raises(QueueConfigError, match=r'queues.yaml: not valid YAML: .*\(line \d+'):
        load_queue_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(QueueConfigError,
                       match=r'nothere.yaml: cannot read the queue config \(QUEUE_CONFIG = '):
        load_queue_config(str(tmp_path / 'nothere.yaml'))


def test_empty_file(tmp_path):
    with pytest.raises(QueueConfigError, match=r'must map queue names to their fields, got an empty'):
        load_queue_config(write_config(tmp_path, ''))


def test_unknown_field_catches_typos(tmp_path):
    with pytest.raises(QueueConfigError, match=r"queue 'q': unknown field 'priorty'"):
        load_queue_config(write_config(tmp_path, entry_yaml() + '  priorty: 3\n'))


def test_invalid_sqs_queue_name(tmp_path):
    with pytest.raises(QueueConfigError, match=r"field 'name' must be an SQS queue name"):
        load_entry(tmp_path, name='"has space"')


def test_entry_that_is_not_a_mapping(tmp_path):
    with pytest.raises(QueueConfigError, match=r"queue 'q': must be a mapping of fields, got int"):
        load_queue_config(write_config(tmp_path, 'q: 3\n'))


def test_relative_path_is_found_beside_the_settings_module(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with settings.override(QUEUE_CONFIG='queue_config.yaml'):
        config = build_queue_config(settings.config)
    assert config.path == os.path.join(ROOT, 'tests', 'queue_config.yaml')


def test_unknown_queue_lists_the_known_ones():
    with pytest.raises(UnknownQueueError,
                       match=r"queue 'nope' is not in the queue config .* "
                             r"\(queues: high, default, low, budget, short, beat, ordered, slowpoll, "
                             r"tenants, recovery\)"):
        build_queue_config(settings.config).get_queue('nope')
