"""Run a worker on the example's queues: `python -m example.worker [--burst]`.

The same as `kale worker`, from Python, as in the original Kale. Run from the
repository root with KALE_SETTINGS_MODULE=example.taskworker.settings.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from kale import worker
from kale.exceptions import KaleError


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description='Run an example worker.')
    parser.add_argument('--burst', action='store_true', help='exit once the queues are empty')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s')
    try:
        return worker.Worker(burst=args.burst).run()
    except KaleError as exc:
        print('worker: error: %s' % exc, file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
