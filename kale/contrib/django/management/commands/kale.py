"""``manage.py kale COMMAND ...``: any ``kale`` command (worker, web, relay,
scheduler, tasks, queues...) with the same options, on the settings of the
Django setting ``KALE``. Django's own ``--settings`` and ``--pythonpath``
keep their meaning (they choose Django's settings), and the workers of
``--concurrency`` run as ``manage.py kale worker`` too."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from django.core.management.base import BaseCommand, CommandError

#: Django's options that ``manage.py`` reads from any command line.
DJANGO_OPTIONS = ('--settings', '--pythonpath')


def split_django_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the kale command line, Django's options in it) from ``argv``."""
    kale: list[str] = []
    django: list[str] = []
    arguments = iter(argv)
    for argument in arguments:
        if argument in DJANGO_OPTIONS:
            django += [argument, next(arguments, '')]
        elif argument.startswith(tuple(option + '=' for option in DJANGO_OPTIONS)):
            django.append(argument)
        else:
            kale.append(argument)
    return kale, django


def run(argv: Sequence[str], prog: str, command: Sequence[str]) -> int:
    """Run one kale command line; its exit code."""
    from django.db import connections

    from kale.cli import main
    try:
        return main(list(argv), prog=prog, command=command)
    finally:
        connections.close_all()


class Command(BaseCommand):
    help = ('Run a kale command (worker, web, relay, scheduler, tasks, queues, ...) with the '
            'settings of KALE; `manage.py kale --help` lists them.')

    def run_from_argv(self, argv: list[str]) -> None:
        kale_argv, django_options = split_django_options(argv[2:])
        manage = os.path.abspath(argv[0])
        sys.exit(run(kale_argv, '%s %s' % (os.path.basename(argv[0]), argv[1]),
                     [sys.executable, manage, argv[1], *django_options]))

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument('kale_args', nargs=argparse.REMAINDER,
                            help='a kale command line, e.g. worker --burst')
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        """``call_command('kale', 'worker', '--burst')``: its workers of
        ``--concurrency`` run as ``python -m django kale`` (under
        DJANGO_SETTINGS_MODULE)."""
        code = run(options['kale_args'], 'kale', [sys.executable, '-m', 'django', 'kale'])
        if code:
            raise CommandError('kale %s exited with %d' % (' '.join(options['kale_args'][:1]),
                                                           code), returncode=code)
