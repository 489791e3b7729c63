"""``python -m kale`` and the ``kale`` console script; stop signals are handled
before the rest of Kale is imported, so a worker told to stop while it is still
starting (it cannot have taken anything from a queue) exits 0."""
import signal
import sys


def _stop_during_startup(signum: int, frame: object) -> None:
    raise SystemExit(0)          # nothing was taken from a queue yet


def run() -> None:
    """The console script: ``kale COMMAND ...``."""
    if sys.argv[1:2] == ['worker']:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _stop_during_startup)
    from kale.cli import main
    sys.exit(main())


if __name__ == '__main__':
    run()
