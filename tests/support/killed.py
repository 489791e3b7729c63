"""A worker killed in the middle of its work, in the test's own process.

Each worker a test runs gets a :class:`Killable` of its own around the
shared in-memory transport. Once killed (a task calls :func:`kill`, as a
task that crashes its process would), the worker can no longer do anything
to the queues: its receives find nothing, its sends, deletes and visibility
changes change nothing, and a burst worker finds its queues empty and
ends. What it held stays in flight until the visibility timeout, then is
delivered again with its receive count raised, as after ``kill -9``.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from kale.transport import OutgoingMessage, QueueCounts, ReceivedMessage, VisibilityChange


class Killable:
    """The transport of one worker's life (see the module docstring)."""

    #: The life that :func:`kill` ends (the worker running now).
    current: Optional['Killable'] = None

    def __init__(self, transport: Any):
        self.transport = transport
        self.local = True
        self.dead = False
        #: Receipt handles this life deleted before it was killed.
        self.deleted: set[str] = set()

    def __getattr__(self, name: str) -> Any:      # the rest: as the transport has it
        return getattr(self.transport, name)

    def send(self, queue: str, message: OutgoingMessage) -> str:
        return 'killed' if self.dead else self.transport.send(queue, message)

    def send_batch(self, queue: str, messages: Sequence[OutgoingMessage]) -> list[str]:
        if self.dead:
            return ['killed'] * len(messages)
        return self.transport.send_batch(queue, messages)

    def receive(self, queue: str, *args: Any, **kwargs: Any) -> list[ReceivedMessage]:
        return [] if self.dead else self.transport.receive(queue, *args, **kwargs)

    def delete_batch(self, queue: str, receipt_handles: Sequence[str]) -> list[str]:
        if self.dead:
            return []
        failed = self.transport.delete_batch(queue, receipt_handles)
        self.deleted.update(set(receipt_handles) - set(failed))
        return failed

    def change_visibility_batch(self, queue: str,
                                changes: Sequence[VisibilityChange]) -> list[str]:
        return [] if self.dead else self.transport.change_visibility_batch(queue, changes)

    def counts(self, queue: str) -> QueueCounts:
        return QueueCounts(0, 0, 0) if self.dead else self.transport.counts(queue)


def kill() -> None:
    """The worker running now dies (the test's stand-in for its process ending)."""
    assert Killable.current is not None, 'no worker life to end (see tests/support/killed.py)'
    Killable.current.dead = True
