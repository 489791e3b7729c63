"""``python -m kale`` runs the ``kale`` command line."""
from kale.cli import run

if __name__ == '__main__':
    run()
