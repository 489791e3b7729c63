"""``kale web``: the task records' REST API and dashboard."""
from __future__ import annotations

import argparse

from kale.cli.options import common_options, port_number


def cmd_web(args: argparse.Namespace) -> int:
    from kale.web.server import serve
    return serve(args.host, args.port, args.token)


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    parser = commands.add_parser(
        'web', parents=[common_options()], help='serve the task records API and dashboard',
        description='Serve the REST API (/api/...) and the live dashboard (/) on the task '
                    'records of RECORDS_URL, with uvicorn, until Ctrl-C. On a loopback address '
                    'no token is needed; on any other, requests need a bearer token '
                    '($KALE_WEB_TOKEN or the WEB_TOKEN setting) and the server refuses to start '
                    'without one.')
    parser.add_argument('--host', default='127.0.0.1',
                        help='address to listen on (default %(default)s)')
    parser.add_argument('--port', type=port_number, default=8000,
                        help='port (default %(default)s; 0 picks a free one)')
    parser.add_argument('--token', help='bearer token (default: $KALE_WEB_TOKEN or WEB_TOKEN); '
                                        'prefer the variable, a command line is visible to all')
    parser.set_defaults(func=cmd_web)
