"""``kale relay ...`` that kills itself with SIGKILL right after its first
send to SQS, before it deletes the rows it sent: the crash the outbox's
at-least-once delivery is built for, in a real process."""
import os
import signal
import sys

from kale.cli import main
from kale.outbox.relay import Relay

_send = Relay._send


def _send_then_die(self, rows):      # type: ignore[no-untyped-def]
    _send(self, rows)
    os.kill(os.getpid(), signal.SIGKILL)


Relay._send = _send_then_die         # type: ignore[method-assign]

if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
