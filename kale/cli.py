"""The ``kale`` command line (also ``python -m kale``).

Each subcommand is a function taking the parsed arguments and returning an
exit code. A user mistake is reported as one line on stderr with a non-zero
exit code, never as a traceback.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Callable, Optional, Sequence

from kale.conf import ENVIRONMENT_VARIABLE, settings
from kale.exceptions import KaleError
from kale.version import __version__

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

Command = Callable[[argparse.Namespace], int]


def _use_settings(module: Optional[str]) -> None:
    if module:
        os.environ[ENVIRONMENT_VARIABLE] = module
        settings.reload()


def cmd_sqs_local(args: argparse.Namespace) -> int:
    from kale import local_server
    local_server.serve(args.host, args.port, verbose=args.verbose,
                       announce=lambda line: print(line, flush=True))
    return 0


def common_options() -> argparse.ArgumentParser:
    """Options every subcommand takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--settings', metavar='MODULE',
                        help='settings module (default: $%s)' % ENVIRONMENT_VARIABLE)
    common.add_argument('--log-level', default='INFO',
                        choices=['DEBUG', 'INFO', 'WARNING', 'ERROR'], help='default %(default)s')
    return common


def _add_sqs_local(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        'sqs-local', parents=[common_options()], help='run an embedded SQS-compatible endpoint (moto) for development',
        description="Run moto's SQS-compatible server on this machine until Ctrl-C or SIGTERM. "
                    "Queues live in memory. Needs the 'local' extra: pip install 'kale[local]'.")
    parser.add_argument('--host', default='127.0.0.1', help='address to listen on (default %(default)s)')
    parser.add_argument('--port', type=port_number, default=9324,
                        help="port to listen on (default %(default)s, ElasticMQ's; 0 picks a free one)")
    parser.add_argument('--verbose', action='store_true', help='log every request')
    parser.set_defaults(func=cmd_sqs_local)


def _queue_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(',') if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError('expected queue names separated by commas')
    return names


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


def _stop_during_startup(signum: int, frame: object) -> None:
    raise SystemExit(0)          # nothing was taken from a queue yet


def cmd_worker(args: argparse.Namespace) -> int:
    from kale.worker import Worker
    worker = Worker(queue_names=args.queues, burst=args.burst)   # validates the configuration
    if args.concurrency is None:
        return worker.run()
    from kale.supervisor import Supervisor, worker_command
    return Supervisor(worker_command(args), args.concurrency).run()


def _add_worker(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        'worker', parents=[common_options()], help='run a worker on the configured queues',
        description='Fetch tasks from the configured queues (picked by QUEUE_SELECTOR) and run '
                    'them until SIGTERM or Ctrl-C: the first signal finishes the running task and '
                    'releases the rest of its batch; a second one stops the running task too. '
                    'Exit codes: 0 stopped or burst done, 1 configuration error, 3 memory limit '
                    '(DIE_ON_RESIDENT_SET_SIZE_MB).')
    parser.add_argument('--queues', type=_queue_list, metavar='A,B',
                        help='serve only these queues (default: every configured queue)')
    parser.add_argument('--burst', action='store_true',
                        help='exit once every served queue has nothing visible, in flight or delayed')
    parser.add_argument('--concurrency', type=positive_int, metavar='N',
                        help='run N worker processes under a supervisor that restarts any that '
                             'exit abnormally (default: one worker, in this process)')
    parser.set_defaults(func=cmd_worker)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='kale', description='Kale: a task worker for Amazon SQS with priority queues. '
                                 'Settings come from the module named by --settings or '
                                 '$KALE_SETTINGS_MODULE; `kale COMMAND --help` explains each '
                                 'command.')
    parser.add_argument('--version', action='version', version='kale %s' % __version__)
    commands = parser.add_subparsers(dest='command', metavar='COMMAND')
    commands.required = True
    for add in COMMANDS:
        add(commands)
    return parser


def _add_admin(commands: argparse._SubParsersAction) -> None:
    from kale import cli_admin
    cli_admin.add_commands(commands, common_options)


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_worker, _add_admin,
                                                                 _add_sqs_local]


def main(argv: Optional[Sequence[str]] = None) -> int:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so settings and task modules import as in a script
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s')
    try:
        _use_settings(getattr(args, 'settings', None))
        return args.func(args)
    except KaleError as exc:
        print('kale: error: %s' % exc, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def run() -> None:
    """The console script. A worker told to stop while it is still starting
    (importing, before it can have taken anything from a queue) exits 0."""
    if sys.argv[1:2] == ['worker']:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _stop_during_startup)
    sys.exit(main())
