"""Running one executor program: arguments in on standard input, the result
out on standard output, standard error kept, the whole process group killed
at the time limit.

The program runs with no shell, in a session (and so a process group) of its
own, so that the time limit reaches whatever it started: SIGTERM to the
group, then SIGKILL after ``kill_grace_sec``. Standard output is kept up to
``stdout_max_bytes`` (past that the rest is read and thrown away, and the run
is marked ``stdout_overflow``); of standard error the last
``stderr_max_bytes`` are kept. Both pipes are read to their end on threads of
their own, so a program that writes much never blocks on a full pipe.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
from typing import IO, Mapping, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock

#: Bytes read from a pipe at a time.
CHUNK = 65536


@dataclasses.dataclass
class Finished:
    """How a program ended and what it wrote."""

    #: Its exit status, or None when a signal ended it.
    exit_code: Optional[int]
    #: The signal that ended it (its number), or None.
    signal: Optional[int]
    stdout: bytes
    stderr: bytes
    #: It wrote more than the standard output kept.
    stdout_overflow: bool
    #: Standard error was cut to its last bytes.
    stderr_cut: bool
    #: The time limit stopped it.
    timed_out: bool
    duration_sec: float

    def describe(self) -> str:
        """How it ended, in words: ``exit status 3``, ``killed by SIGKILL``."""
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = 'signal %d' % self.signal
            return 'killed by %s' % name
        return 'exit status %s' % self.exit_code


class _Keep:
    """Reads one pipe to its end, keeping its first or its last bytes."""

    def __init__(self, pipe: IO[bytes], max_bytes: int, keep_last: bool):
        self.pipe = pipe
        self.max_bytes = max_bytes
        self.keep_last = keep_last
        self.data = bytearray()
        self.overflow = False
        self.thread = threading.Thread(target=self._read, daemon=True, name='kale-executor-pipe')
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                chunk = self.pipe.read1(CHUNK) if hasattr(self.pipe, 'read1') else \
                    self.pipe.read(CHUNK)
                if not chunk:
                    return
                if self.keep_last:
                    self.data += chunk
                    if len(self.data) > self.max_bytes:
                        del self.data[:len(self.data) - self.max_bytes]
                        self.overflow = True
                elif not self.overflow:
                    room = self.max_bytes - len(self.data)
                    self.data += chunk[:room]
                    if len(chunk) > room:
                        self.overflow = True
        except (OSError, ValueError):            # the pipe closed under us
            return
        finally:
            try:
                self.pipe.close()
            except OSError:
                pass


def run_program(argv: Sequence[str], stdin: bytes, time_limit_sec: float, *,
                cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                stdout_max_bytes: int = 16 * 1024 * 1024, stderr_max_bytes: int = 64 * 1024,
                kill_grace_sec: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> Finished:
    """Run ``argv`` with ``stdin`` on its standard input until it exits or its
    time limit passes (then its process group is killed); OSError when it
    cannot be started."""
    started = clock.monotonic()
    process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=cwd, env=dict(env) if env else None,
                               start_new_session=True, close_fds=True)
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    out = _Keep(process.stdout, stdout_max_bytes, keep_last=False)
    err = _Keep(process.stderr, stderr_max_bytes, keep_last=True)
    feeder = threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True,
                              name='kale-executor-stdin')
    feeder.start()
    timed_out = False
    try:
        try:
            process.wait(max(0.0, time_limit_sec))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process, kill_grace_sec)
    finally:
        if process.poll() is None:           # the caller was interrupted: nothing is left behind
            _kill_group(process, 0.0)
        else:
            _kill_group_leftovers(process)
    for keeper in (out, err):
        keeper.thread.join(max(1.0, kill_grace_sec))
    feeder.join(1.0)
    code = process.returncode
    return Finished(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                    stdout=bytes(out.data), stderr=bytes(err.data), stdout_overflow=out.overflow,
                    stderr_cut=err.overflow, timed_out=timed_out,
                    duration_sec=clock.monotonic() - started)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):     # it exited without reading it all
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(process: subprocess.Popen, grace_sec: float) -> None:
    """SIGTERM to the group, SIGKILL after ``grace_sec`` if the leader is still there."""
    if grace_sec > 0:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(grace_sec)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _kill_group_leftovers(process: subprocess.Popen) -> None:
    """The leader exited: whatever it started in its group and left running
    (holding the pipes open) goes too."""
    _signal_group(process, signal.SIGKILL)
