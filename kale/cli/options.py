"""Options and argument types the ``kale`` subcommands share, and the helpers
that declare a command from data: :func:`command` takes its options as
:func:`arg` tuples, :func:`group` makes a command of subcommands."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any, Callable, Optional

from kale.conf import ENVIRONMENT_VARIABLE

LEVELS = ['DEBUG', 'INFO', 'WARNING', 'ERROR']


#: The common options' defaults, taken when no level of the command gave one.
COMMON_DEFAULTS = {'settings': None, 'log_level': 'INFO', 'aws_log_level': 'WARNING'}

#: One option or argument of a command: ``add_argument``'s arguments.
Option = tuple[tuple[str, ...], dict[str, Any]]


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


def arg(*names: str, **kwargs: Any) -> Option:
    """An option or argument of a command, as ``add_argument`` takes it."""
    return names, kwargs


def flag(name: str, text: str) -> Option:
    """An option that is on when given."""
    return arg(name, action='store_true', help=text)


JSON = flag('--json', 'print JSON')
YES = flag('--yes', 'do not ask for confirmation')


def command(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]', name: str,
            func: Optional[Callable[[argparse.Namespace], int]], text: str,
            description: Optional[str] = None, *options: Option,
            common: bool = True) -> argparse.ArgumentParser:
    """Add command ``name`` running ``func``, with the common options
    (unless ``common`` is false) and ``options``."""
    parser = commands.add_parser(name, parents=[common_options()] if common else [], help=text,
                                 description=description)
    for names, kwargs in options:
        parser.add_argument(*names, **kwargs)
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def subcommands(parser: argparse.ArgumentParser, name: str,
                required: bool = True) -> 'argparse._SubParsersAction[argparse.ArgumentParser]':
    """The subcommands of command ``name`` (its parser)."""
    return parser.add_subparsers(dest=name + '_command', metavar='COMMAND', required=required)


def group(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]', name: str, text: str,
          description: str) -> 'argparse._SubParsersAction[argparse.ArgumentParser]':
    """Add command ``name``, made of subcommands (without the common options:
    each subcommand has them)."""
    return subcommands(command(commands, name, None, text, description, common=False), name)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def counts_text(counts: dict[str, int]) -> str:
    """``name count, ...`` in name order."""
    return ', '.join('%s %d' % item for item in sorted(counts.items())) or 'none'


def output(args: argparse.Namespace, value: Any, text: Any) -> int:
    """Prints ``value`` as JSON with ``--json``, else ``text``; exit code 0."""
    if args.json:
        print_json(value)
    else:
        print(text)
    return 0


def on_stop_signals(logger: logging.Logger, who: str, *stops: Callable[[], Any]) -> None:
    """Each of ``stops`` called on SIGTERM and SIGINT, logged as ``who``'s."""
    def stop_on(signum: int, frame: Any) -> None:
        logger.info('%s: %s received; stopping', who, signal.Signals(signum).name)
        for stop in stops:
            stop()
    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGINT, stop_on)


def confirm(question: str) -> bool:
    """Asks on stderr; True for a yes on stdin."""
    sys.stderr.write(question + ' [y/N] ')
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ('y', 'yes')


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
