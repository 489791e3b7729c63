"""Limits a worker checks between batches, and the exit codes they lead to.

- Resident memory over ``DIE_ON_RESIDENT_SET_SIZE_MB``: the worker releases
  what it holds and exits with :data:`EXIT_MEMORY_LIMIT`, for its
  supervisor to start a fresh one.
- A supervisor that is gone (``kale worker --concurrency`` sets
  :data:`SUPERVISOR_PID_VARIABLE`): the worker stops gracefully instead of
  running on unsupervised.
"""
from __future__ import annotations

import os
import resource
import sys
from typing import Optional

EXIT_OK = 0
EXIT_MEMORY_LIMIT = 3

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
        return peak_resident_set_size_mb()


def peak_resident_set_size_mb() -> float:
    """The most resident memory this process has had, in MB (one system call)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / _MAXRSS_PER_MB


class MemoryLimit:
    """``DIE_ON_RESIDENT_SET_SIZE_MB``: 0 turns the check off.

    Checked after every task, so it must be cheap: resident memory can only be
    over the limit once the peak is, and the peak costs one ``getrusage``;
    only then is the current size read from ``/proc``.
    """

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


def supervisor_gone(pid: Optional[int]) -> bool:
    """Whether the supervisor with ``pid`` no longer is this process's parent."""
    return pid is not None and os.getppid() != pid
