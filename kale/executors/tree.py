"""Killing an executor program's whole process tree from the worker (Linux),
whatever the program did to its reaper (docs/explanation/internals-workflow.md, "Killing the tree")."""
from __future__ import annotations

import logging
import os
import time
from typing import Iterable

from kale.executors.reaper import Proc, kill_all, snapshot, with_descendants

logger = logging.getLogger(__name__)

#: The environment variable that marks every process of one run.
COOKIE_VARIABLE = 'KALE_RUN_COOKIE'
#: Seconds spent killing a tree at most (a process stuck in the kernel dies
#: when it comes out of it; one that never does is left, and logged).
KILL_SEC = 10.0


def _marked(pids: Iterable[int], cookie: str) -> set[int]:
    """Those of ``pids`` whose environment carries the run's cookie."""
    entry = ('%s=%s' % (COOKIE_VARIABLE, cookie)).encode()
    marked = set()
    for pid in pids:
        try:
            with open('/proc/%d/environ' % pid, 'rb') as environ:
                if entry in environ.read().split(b'\0'):
                    marked.add(pid)
        except OSError:             # ended, or another user's
            continue
    return marked


def _roots(reaper: int, reaper_reaped: bool, procs: dict[int, Proc]) -> set[int]:
    """The reaper's children while it lives, and its session (once it is
    reaped its pid may name another process: only while no process has it)."""
    if not reaper_reaped:
        return {pid for pid, proc in procs.items()
                if proc.parent == reaper or proc.session == reaper}
    if reaper in procs:
        return set()
    return {pid for pid, proc in procs.items() if proc.session == reaper}


def members(reaper: int, reaper_reaped: bool, cookie: str) -> set[int]:
    """The processes of the run of ``reaper`` that still run (the reaper
    itself aside)."""
    procs = snapshot()
    roots = _roots(reaper, reaper_reaped, procs) | _marked(procs, cookie)
    found = with_descendants(roots, procs) - {reaper, os.getpid()}
    return {pid for pid in found if procs[pid].running}


def kill_tree(reaper: int, reaper_reaped: bool, cookie: str, sec: float = KILL_SEC) -> bool:
    """Kill every process of the run of ``reaper`` (its descendants, its
    session's, those with the run's cookie) until none runs, for ``sec`` at
    most; whether none does."""
    deadline = time.monotonic() + sec
    pause = 0.002
    while True:
        left = members(reaper, reaper_reaped, cookie)
        if not left:
            return True
        if time.monotonic() >= deadline:
            logger.warning('executor reaper %d: %d processes of its tree still run after %.0fs '
                           'of SIGKILL (stuck in the kernel?): pids %s', reaper, len(left), sec,
                           ' '.join(map(str, sorted(left)[:20])))
            return False
        kill_all(left)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
