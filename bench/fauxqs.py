"""fauxqs, the fast SQS emulator the benchmarks run against (``--endpoint
fauxqs``): installed and started by :mod:`kale.fauxqs`, the same pinned
version ``kale sqs-local --engine fauxqs`` serves.

    python -m bench.fauxqs PORT      # install if needed, serve until Ctrl-C or SIGTERM
"""
from __future__ import annotations

import sys

from kale.fauxqs import HERE, FauxqsError, cache_dir, install, install_command, start

__all__ = ['HERE', 'FauxqsError', 'cache_dir', 'install', 'install_command', 'main', 'start']


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print('usage: python -m bench.fauxqs PORT', file=sys.stderr)
        return 2
    from kale.cli.sqs_local import serve
    try:
        serve(port=int(argv[0]), engine='fauxqs', announce=lambda line: print(line, flush=True))
    except FauxqsError as exc:
        print('bench.fauxqs: %s' % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
