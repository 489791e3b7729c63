"""Options and argument types the ``kale`` subcommands share."""
from __future__ import annotations

import argparse

from kale.conf import ENVIRONMENT_VARIABLE

LEVELS = ['DEBUG', 'INFO', 'WARNING', 'ERROR']


def common_options() -> argparse.ArgumentParser:
    """Options every subcommand takes: ``--settings`` and ``--log-level``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--settings', metavar='MODULE',
                        help='settings module (default: $%s)' % ENVIRONMENT_VARIABLE)
    common.add_argument('--log-level', default='INFO', choices=LEVELS,
                        help="Kale's and the application's log level (default %(default)s)")
    common.add_argument('--aws-log-level', default='WARNING', choices=LEVELS,
                        help='log level of botocore, boto3 and urllib3 (default %(default)s); '
                             'credentials and message bodies are redacted even at DEBUG')
    return common


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
