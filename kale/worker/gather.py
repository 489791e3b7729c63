"""Settling messages that end close together in batch requests.

With many tasks in flight a worker's messages end one by one, each with its
own budget. Each is settled as soon as its task ends, but not in a request of
its own: what ends within ``hold_sec`` of the first on the same queue goes
in one settle, up to ``size`` messages (SQS takes ten entries per request).
While every settling thread is busy (``busy()``), a settle handed over would
only wait for one, so the gatherer keeps adding to it instead, up to
``size`` messages or ``busy_hold_sec``. The merged batch's deadline is the
earliest of its messages', so its copies are sent only while every one of
them still has time.
"""
from __future__ import annotations

from typing import Callable, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.worker.batch import Batch

#: Longest a settled message waits for others to share its requests.
HOLD_SEC = 0.003
#: Longest it waits while every settling thread is busy.
BUSY_HOLD_SEC = 0.05
#: How often a part held past ``hold_sec`` while every settling thread is
#: busy is looked at again (a thread that frees says nothing): without it a
#: worker's loop turned thousands of times a second, taking the interpreter
#: from the threads it waited for.
BUSY_LOOK_SEC = 0.002
#: Messages settled in one batch (SQS's limit per request).
SIZE = 10


def merge(parts: list[Batch]) -> Batch:
    """One batch holding the messages and settlements of ``parts`` (of one queue)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    deadline = min(part.deadline for part in parts)
    opened = {}
    for part in parts:
        opened.update(part.opened)
    return Batch(first.queue, [m for part in parts for m in part.messages],
                 deadline - first.queue.visibility_timeout_sec, first.sqs_name,
                 settlements=[s for part in parts for s in part.settlements], opened=opened)


class Gatherer:
    """Holds decided parts per queue and hands them to ``settle`` merged."""

    def __init__(self, settle: Callable[[Batch], None], clock: Clock = SYSTEM_CLOCK,
                 hold_sec: float = HOLD_SEC, size: int = SIZE,
                 busy: Callable[[], bool] = lambda: False, busy_hold_sec: float = BUSY_HOLD_SEC):
        self.settle = settle
        self.clock = clock
        self.hold_sec = hold_sec
        self.size = size
        self.busy = busy
        self.busy_hold_sec = busy_hold_sec
        self._held: dict[str, tuple[float, list[Batch], int]] = {}

    def add(self, part: Batch) -> None:
        """A batch whose messages are all decided; settled within ``hold_sec``."""
        name = part.queue.name
        held = self._held.get(name)
        if held is None:
            held = (self.clock.monotonic(), [], 0)
        since, parts, count = held
        parts.append(part)
        count += len(part.messages)
        if count >= self.size:
            self._held.pop(name, None)
            self.settle(merge(parts))
        else:
            self._held[name] = (since, parts, count)

    def due_in(self) -> Optional[float]:
        """Seconds until the oldest held part must be settled (None: none held)."""
        if not self._held:
            return None
        oldest = min(since for since, _, _ in self._held.values())
        now = self.clock.monotonic()
        due = oldest + self.hold_sec - now
        if due > 0.0:
            return due
        # Past its hold it is still here only while every settling thread is busy.
        return max(0.0, min(BUSY_LOOK_SEC, oldest + self.busy_hold_sec - now))

    def flush(self, everything: bool = False) -> None:
        """Settle what was held ``hold_sec`` (``everything``: all that is held)."""
        if not self._held:
            return
        now = self.clock.monotonic()
        busy: Optional[bool] = None
        for name, (since, parts, _) in list(self._held.items()):
            held = now - since
            if not everything and held < self.hold_sec:
                continue
            if not everything and held < self.busy_hold_sec:
                if busy is None:
                    busy = self.busy()
                if busy:
                    continue
            del self._held[name]
            self.settle(merge(parts))

    def __bool__(self) -> bool:
        return bool(self._held)
