"""The receives a worker has out, so that a stopping worker waits for their answers
(a long poll cannot be called back): docs/explanation/internals-worker.md,
"Receives still out when a worker stops".
"""
from __future__ import annotations

import logging
import threading

logger = logging.getLogger('kale.worker')

#: How long past its wait time a stopping worker waits for a receive's answer.
ANSWER_MARGIN_SEC = 2.0
#: How often the wait looks again.
LOOK_SEC = 0.05


class ReceivesOut:
    """Receives sent and not yet answered, each with how long its answer may take."""

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}
        self._next = 0
        self._changed = threading.Condition()

    def sent(self, wait_sec: float) -> int:
        """A receive waiting up to ``wait_sec`` went out: its key for :meth:`answered`."""
        with self._changed:
            self._next += 1
            self._seconds[self._next] = wait_sec + ANSWER_MARGIN_SEC
            return self._next

    def answered(self, key: int) -> None:
        """The receive ``key`` answered (and what it brought was handed on)."""
        with self._changed:
            self._seconds.pop(key, None)
            self._changed.notify_all()

    def __len__(self) -> int:
        return len(self._seconds)

    def wait(self) -> int:
        """Wait for the receives out to answer, at most as long as the
        longest of them may take (counted from now, in seconds waited: a
        test's clock may stand still); how many did not answer."""
        with self._changed:
            left = max(self._seconds.values(), default=0.0)
            while self._seconds and left > 0:
                self._changed.wait(min(left, LOOK_SEC))
                left -= LOOK_SEC
            return len(self._seconds)


def wait_for_answers(out: ReceivesOut) -> None:
    """(A stopping worker.) Wait for the receives ``out``, saying so when there are any."""
    if len(out):
        logger.info('waiting for the answer of %d receive(s) still out (a long poll cannot be '
                    'called back): what they bring is given back', len(out))
        unanswered = out.wait()
        if unanswered:
            logger.warning('%d receive(s) still out did not answer in time: what they took '
                           'comes back after its visibility timeout', unanswered)
