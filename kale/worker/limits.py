"""Limits a worker checks between batches (memory, a stuck task, a supervisor gone),
and the exit codes they lead to (docs/explanation/internals-worker.md,
"Stopping, limits and exit codes").
"""
from __future__ import annotations

import logging
import os
import resource
import sys
from typing import Any, Optional

from kale.default_settings import Settings

logger = logging.getLogger('kale.worker')

EXIT_OK = 0
EXIT_MEMORY_LIMIT = 3
#: A task did not come back from its time limit (see TaskStuck).
EXIT_STUCK = 4

#: Set by ``kale worker --concurrency`` to the supervisor's pid.
SUPERVISOR_PID_VARIABLE = 'KALE_SUPERVISOR_PID'

#: ``ru_maxrss`` is in bytes on macOS, in KiB elsewhere.
_MAXRSS_PER_MB = 1024.0 * 1024.0 if sys.platform == 'darwin' else 1024.0


def resident_set_size_mb() -> float:
    """This process's resident memory in MB."""
    try:
        with open('/proc/self/statm') as f:
            return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / (1024.0 * 1024.0)
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / _MAXRSS_PER_MB  # the peak


def memory_limit_mb(config: Any, transport: Any) -> float:
    """The resident memory a worker stops at: DIE_ON_RESIDENT_SET_SIZE_MB,
    but for a worker on the in-memory transport, which runs in a test's
    process (whose memory is the test runner's), only when set to other than
    its default."""
    limit = config.DIE_ON_RESIDENT_SET_SIZE_MB
    if getattr(transport, 'in_process', False) and \
            limit == Settings.__dataclass_fields__['DIE_ON_RESIDENT_SET_SIZE_MB'].default:
        return 0.0
    return float(limit)


class MemoryLimit:
    """``DIE_ON_RESIDENT_SET_SIZE_MB`` (0: off), checked after every task, so cheaply: the
    current size (from ``/proc``) is read only once the peak (one ``getrusage``) is over."""

    def __init__(self, limit_mb: float):
        self.limit_mb = float(limit_mb or 0)
        self._limit_maxrss = self.limit_mb * _MAXRSS_PER_MB     # in ru_maxrss's unit

    def exceeded(self) -> bool:
        if not self.limit_mb or \
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss <= self._limit_maxrss:
            return False
        return resident_set_size_mb() > self.limit_mb


def supervisor_pid() -> Optional[int]:
    """The pid of the supervisor that started this worker, if one did."""
    value = os.environ.get(SUPERVISOR_PID_VARIABLE, '')
    return int(value) if value.isdigit() else None


def over_limits(who: str, supervisor: Optional[int], memory: MemoryLimit) -> Optional[int]:
    """The code to exit with, logged, once the supervisor is gone (EXIT_OK: a graceful
    stop) or memory is over the limit; None while neither."""
    if supervisor is not None and os.getppid() != supervisor:     # no longer its parent
        logger.error('%s: supervisor %d is gone; stopping', who, supervisor)
        return EXIT_OK
    if memory.exceeded():
        logger.error('%s: resident memory %.0f MB is over DIE_ON_RESIDENT_SET_SIZE_MB=%g; '
                     'exiting with code %d', who, resident_set_size_mb(), memory.limit_mb,
                     EXIT_MEMORY_LIMIT)
        return EXIT_MEMORY_LIMIT
    return None


class TaskStuck(BaseException):
    """A task is still running ``WORKER_STUCK_GRACE_SEC`` after its time
    limit stopped it (a thread blocked in a C call, a coroutine that does not
    come back): the worker stops and exits with :data:`EXIT_STUCK`."""
