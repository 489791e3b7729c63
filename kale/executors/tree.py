"""Killing an executor program's whole process tree from the worker (Linux),
whatever the program did to its reaper.

The reaper (:mod:`kale.executors.reaper`) ends the tree when the program
exits, but it is a process of the program's user: the program can stop it
(SIGSTOP) or kill it (SIGKILL). So at the time limit, when the run's caller
is interrupted, and when the reaper ended without saying that it left
nothing behind, the worker does not ask it: it kills with SIGKILL, round
after round until none of them runs, every process that is

- a descendant of the reaper while the reaper lives, stopped or not (as a
  child subreaper it adopts every orphan of the tree: nothing leaves it);
- in the reaper's session (the program's, and all the program started that
  did not call ``setsid()``), or a descendant of one: what the program
  started, once a killed reaper's children have gone to init;
- marked with the run's cookie, the environment variable
  :data:`COOKIE_VARIABLE` (a random token only the run's processes
  inherit, as Jenkins marks a build's processes): a daemon that left the
  session after its parent exited, when the program then killed its reaper.

Everything here reads ``/proc``; a process of another user is not
touched (its environment cannot be read, nor can it be killed).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Iterable, NamedTuple

logger = logging.getLogger(__name__)

#: The environment variable that marks every process of one run.
COOKIE_VARIABLE = 'KALE_RUN_COOKIE'
#: Seconds spent killing a tree at most (a process stuck in the kernel dies
#: when it comes out of it; one that never does is left, and logged).
KILL_SEC = 10.0


class Proc(NamedTuple):
    """One process as ``/proc/PID/stat`` shows it."""

    parent: int
    session: int
    #: Still running: neither a zombie nor dead.
    running: bool


def snapshot() -> dict[int, Proc]:
    """Every process of the system, by pid."""
    found: dict[int, Proc] = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name, 'rb') as stat:
                data = stat.read()
        except OSError:             # it ended meanwhile
            continue
        fields = data[data.rindex(b')') + 2:].split()
        found[int(name)] = Proc(int(fields[1]), int(fields[3]), fields[0] not in (b'Z', b'X'))
    return found


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


def _with_descendants(roots: set[int], procs: dict[int, Proc]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, proc in procs.items():
        children.setdefault(proc.parent, []).append(pid)
    found = set(roots)
    frontier = list(roots)
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def _roots(reaper: int, reaper_reaped: bool, procs: dict[int, Proc]) -> set[int]:
    """The reaper's children while it lives, and its session. Once it is
    reaped its pid may name another process: its session is asked for only
    while no process has that pid."""
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
    found = _with_descendants(roots, procs) - {reaper, os.getpid()}
    return {pid for pid in found if procs[pid].running}


def kill_tree(reaper: int, reaper_reaped: bool, cookie: str, sec: float = KILL_SEC) -> bool:
    """Kill every process of the run of ``reaper`` (see the module's
    docstring) until none runs, for ``sec`` at most; whether none does."""
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
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
