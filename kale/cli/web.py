"""``kale web``: the task records' REST API and dashboard."""
from __future__ import annotations

import argparse

from kale.cli.options import arg, command, port_number


def cmd_web(args: argparse.Namespace) -> int:
    from kale.web.server import serve
    return serve(args.host, args.port, args.token)


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    command(commands, 'web', cmd_web, 'serve the task records API and dashboard',
            'Serve the REST API (/api/...) and the live dashboard (/) on the task records of '
            'RECORDS_URL, with uvicorn, until Ctrl-C. On a loopback address no token is needed; '
            'on any other, requests need a bearer token ($KALE_WEB_TOKEN or the WEB_TOKEN '
            'setting) and the server refuses to start without one.',
            arg('--host', default='127.0.0.1', help='address to listen on (default %(default)s)'),
            arg('--port', type=port_number, default=8000,
                help='port (default %(default)s; 0 picks a free one)'),
            arg('--token', help='bearer token (default: $KALE_WEB_TOKEN or WEB_TOKEN); prefer the '
                                'variable, a command line is visible to all'))
