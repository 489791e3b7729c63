"""The options every `kale` command shares, wherever they stand on the line."""
from __future__ import annotations

import pytest

from kale.cli import build_parser
from kale.cli.options import with_common_defaults


def parsed(*argv):
    return with_common_defaults(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize('argv', [
    ('queues', '--settings', 'myapp.settings', 'pause', 'default'),
    ('queues', 'pause', 'default', '--settings', 'myapp.settings'),
    ('workers', '--settings', 'myapp.settings', 'stop', 'host:1'),
    ('worker', '--settings', 'myapp.settings'),
])
def test_settings_given_before_or_after_a_nested_command_are_kept(argv):
    args = parsed(*argv)
    assert args.settings == 'myapp.settings'
    assert (args.log_level, args.aws_log_level) == ('INFO', 'WARNING')


def test_the_levels_default_when_no_level_of_the_command_gives_them():
    args = parsed('queues', '--log-level', 'DEBUG', 'resume', 'default')
    assert (args.settings, args.log_level, args.aws_log_level) == (None, 'DEBUG', 'WARNING')
