"""Options and argument types the ``kale`` subcommands share."""
from __future__ import annotations

import argparse

from kale.conf import ENVIRONMENT_VARIABLE

LEVELS = ['DEBUG', 'INFO', 'WARNING', 'ERROR']


#: The common options' defaults, taken when no level of the command gave one.
COMMON_DEFAULTS = {'settings': None, 'log_level': 'INFO', 'aws_log_level': 'WARNING'}


def common_options() -> argparse.ArgumentParser:
    """Options every subcommand takes: ``--settings`` and ``--log-level``.
    They may come before or after a nested subcommand (``kale queues
    --settings S pause NAME`` as ``kale queues pause NAME --settings S``): no
    level sets a default that would hide a value given at another (see
    :func:`with_common_defaults`)."""
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument('--settings', metavar='MODULE',
                        help='settings module (default: $%s)' % ENVIRONMENT_VARIABLE)
    common.add_argument('--log-level', choices=LEVELS,
                        help="Kale's and the application's log level (default INFO)")
    common.add_argument('--aws-log-level', choices=LEVELS,
                        help='log level of botocore, boto3 and urllib3 (default WARNING); '
                             'credentials and message bodies are redacted even at DEBUG')
    return common


def with_common_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The parsed command line with the common options no level gave set to
    their defaults."""
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError('must be a whole number of at least 1, got %r' % text)
    return int(text)


def port_number(text: str) -> int:
    """An argparse type: 0 (any free port) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError('must be a port number from 0 to 65535, got %r' % text)
    return int(text)


def queue_list(text: str) -> list[str]:
    """An argparse type: queue names separated by commas."""
    names = [name.strip() for name in text.split(',') if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError('expected queue names separated by commas')
    return names
