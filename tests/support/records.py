"""Record files: lines appended by several processes (worker tasks, the chaos
run, benchmark tasks) and read back by the test or benchmark that started them."""
from __future__ import annotations

import os
from typing import Optional


def append_line(path: str, line: str) -> None:
    """Append ``line`` (and a newline) with one write to an O_APPEND file, so
    lines from concurrent worker processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + '\n').encode())
    finally:
        os.close(fd)


def read_records(path: str) -> list[list[str]]:
    """[[event, task_id, pid, time, details...]] from a record file."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def recorded_ids(path: str, event: str) -> list[str]:
    """Task ids of the records of one event, in order."""
    return [r[1] for r in read_records(path) if r[0] == event]


def records_of(path: str, event: str) -> list[list[str]]:
    """The records of one event, in order."""
    return [r for r in read_records(path) if r[0] == event]


def most_at_once(path: str, pid: Optional[str] = None) -> int:
    """The most runs recorded as going on at one time (start/end lines; of
    the process ``pid`` only, when given)."""
    edges = [(float(r[3]), 1 if r[0] == 'start' else -1) for r in read_records(path)
             if r[0] in ('start', 'end') and (pid is None or r[2] == pid)]
    # At equal times an end comes first: it freed the place the start took.
    edges.sort()
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
