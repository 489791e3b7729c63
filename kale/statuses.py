"""The statuses of what Kale keeps: a task's record, a workflow, a node and
a worker. Each is a string enum, its value wherever a string goes (a column,
JSON, a log line); code names the member, never the literal. Imports nothing.
"""
from __future__ import annotations

import enum


class _Status(str, enum.Enum):
    """A status: equal to, and shown as, its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class TaskStatus(_Status):
    """A task record's status."""

    QUEUED = 'queued'
    RUNNING = 'running'
    SCHEDULED = 'scheduled'         # a retry or a long delay waits for its time
    SUCCEEDED = 'succeeded'
    FAILED = 'failed'
    CANCELLED = 'cancelled'
    PURGED = 'purged'               # its queue was purged before it ran
    DEDUPLICATED = 'deduplicated'   # dropped as a repeat of another (FIFO, unique tasks)

    @property
    def final(self) -> bool:
        """Whether the task is over (nothing more happens to its record)."""
        return self in FINAL_TASK


#: Not over yet; the ``pending`` filter of the records is these.
PENDING_TASK = (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SCHEDULED)
#: Over.
FINAL_TASK = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED,
              TaskStatus.PURGED, TaskStatus.DEDUPLICATED)
#: The records' filter that stands for every pending status.
PENDING_FILTER = 'pending'


class WorkflowStatus(_Status):
    """A workflow's status."""

    RUNNING = 'running'
    SUCCEEDED = 'succeeded'
    FAILED = 'failed'
    CANCELLED = 'cancelled'


class NodeStatus(_Status):
    """A workflow node's state."""

    PENDING = 'pending'             # waiting for its inputs
    QUEUED = 'queued'               # published (or about to be)
    SUCCEEDED = 'succeeded'
    FAILED = 'failed'
    CANCELLED = 'cancelled'


#: A node's final states.
FINAL_NODE = (NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.CANCELLED)


class WorkerState(_Status):
    """A worker process's state, from its row in the records."""

    RUNNING = 'running'
    STOPPED = 'stopped'
    LOST = 'lost'                   # silent for three heartbeats


def status_values(status: type[_Status]) -> list[str]:
    """The values of a status enum, in order (for the API's description)."""
    return [member.value for member in status]
