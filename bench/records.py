"""Appending one line to a file shared by several processes."""
from __future__ import annotations

import os


def append_line(path: str, line: str) -> None:
    """Append ``line`` (and a newline) with one write to an O_APPEND file, so
    lines from concurrent worker processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + '\n').encode())
    finally:
        os.close(fd)
