"""The ``kale`` command line (also ``python -m kale``): each subcommand is an
``add_commands`` and a ``cmd_*`` of a module here; :func:`main` runs one
command line. See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from kale import logs
from kale.cli import (
    admin,
    config,
    outbox,
    schedules,
    sqs_local,
    submit,
    tasks,
    topics,
    web,
    webhooks,
    worker,
    workflows,
)
from kale.cli.options import with_common_defaults
from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.exceptions import ImproperlyConfigured, KaleError
from kale.version import __version__

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
#: What a shell reports for a command whose output pipe closed (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141

#: The modules whose commands ``kale`` offers, in the order ``--help`` lists them.
COMMAND_MODULES = [worker, admin, tasks, workflows, submit, outbox, schedules, topics, webhooks,
                   web, config, sqs_local]


def build_parser(prog: str = 'kale') -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description='Kale: a task worker for Amazon SQS with priority queues. '
                                 'Settings come from the module named by --settings or '
                                 '$KALE_SETTINGS_MODULE; `kale COMMAND --help` explains each '
                                 'command.')
    parser.add_argument('--version', action='version', version='kale %s' % __version__)
    commands = parser.add_subparsers(dest='command', metavar='COMMAND')
    commands.required = True
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def _log_format() -> str:
    """``LOG_FORMAT``, or 'text' while the settings cannot be read (the
    command reports why, if it needs them)."""
    try:
        return str(settings.LOG_FORMAT)
    except KaleError:
        return 'text'


#: Said before a configuration error when no settings module was named: the
#: error (no AWS region, no queue config) comes from the defaults alone.
NO_SETTINGS_MODULE = ('no settings module is set: set %s to your settings module (e.g. '
                      'export %s=kale.presets.local) or pass --settings MODULE; with the defaults '
                      'alone: ' % (ENVIRONMENT_VARIABLE, ENVIRONMENT_VARIABLE))


def main(argv: Optional[Sequence[str]] = None, prog: str = 'kale',
         command: Optional[Sequence[str]] = None) -> int:
    """Run one ``kale`` command line in this process; returns its exit code.
    ``prog`` names the command in its help and errors, and ``command`` is
    the command line that runs it again (for the workers of
    ``--concurrency``; by default ``python -m kale``): ``manage.py kale``
    gives both, and then ``--settings`` is Django's, not a Kale settings
    module (its settings come from Django's)."""
    if os.getcwd() not in sys.path:
        # Settings and task modules import from here, as in a script; appended,
        # so a file here (a yaml.py) cannot shadow an installed package.
        sys.path.append(os.getcwd())
    args = with_common_defaults(build_parser(prog).parse_args(argv))
    args.kale_command = list(command) if command else [sys.executable, '-m', 'kale']
    logs.configure(args.log_level, args.aws_log_level)
    try:
        if command is None and args.settings:
            settings.use_module(args.settings, '--settings')
        log_format = _log_format()
        if log_format != 'text':
            logs.configure(args.log_level, args.aws_log_level, log_format=log_format)
        code = int(args.func(args))
        sys.stdout.flush()          # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (`kale tasks show ID | head`): the rest of the
        # output has nowhere to go, and is dropped without a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KaleError as exc:
        print('%s: error: %s' % (prog, _error_text(exc)), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _error_text(exc: KaleError) -> str:
    """The error, after :data:`NO_SETTINGS_MODULE` when it comes from the defaults alone."""
    unset = isinstance(exc, ImproperlyConfigured) and not settings.given_values \
        and not os.environ.get(ENVIRONMENT_VARIABLE, '').strip()
    return (NO_SETTINGS_MODULE if unset else '') + str(exc)
