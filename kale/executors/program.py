"""Running one executor program: arguments in on standard input, the result
out on standard output, standard error kept, and everything it started
ended at the time limit.

The program runs with no shell, in a session (and so a process group) of its
own. On Linux it runs under :mod:`kale.executors.reaper`, a child
subreaper: a descendant that leaves the group (``setsid()``) and whose
parent dies is re-parented to the reaper, not to init, so nothing the
program starts outlives its run. At the time limit the group gets SIGTERM;
after ``kill_grace_sec`` the reaper kills every descendant with SIGKILL
(elsewhere, the group gets SIGKILL, and a descendant that left it escapes).
When the program ends, whatever it left running is killed and reaped.

Standard output is kept up to ``stdout_max_bytes`` (past that the rest is
read and thrown away, and the run is marked ``stdout_overflow``); of
standard error the last ``stderr_max_bytes`` are kept. Both pipes are read
to their end on threads of their own, so a program that writes much never
blocks on a full pipe. The reaper costs a small Python process a run (some
15 ms of CPU).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Mapping, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock
from kale.executors.reaper import descendants

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


#: The reaper, run as a script (kale.executors.reaper).
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'reaper.py')
#: Whether programs run under the reaper (it needs Linux's child subreapers).
USE_REAPER = sys.platform.startswith('linux')
#: Seconds the reaper gets to kill and reap a program's tree once told to.
REAPER_SEC = 15.0


def run_program(argv: Sequence[str], stdin: bytes, time_limit_sec: float, *,
                cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                stdout_max_bytes: int = 16 * 1024 * 1024, stderr_max_bytes: int = 64 * 1024,
                kill_grace_sec: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> Finished:
    """Run ``argv`` with ``stdin`` on its standard input until it exits or its
    time limit passes (then it and all it started are killed); OSError when
    it cannot be started."""
    started = clock.monotonic()
    process, status = _start(argv, cwd, env)
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
            _stop(process, kill_grace_sec, status is not None)
    finally:
        if process.poll() is None:           # the caller was interrupted: nothing is left behind
            _stop(process, 0.0, status is not None)
        else:
            _kill_group_leftovers(process)
    for keeper in (out, err):
        keeper.thread.join(max(1.0, kill_grace_sec))
    feeder.join(1.0)
    if status is not None:
        _raise_unstarted(status, argv[0])
    code = process.returncode
    return Finished(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                    stdout=bytes(out.data), stderr=bytes(err.data), stdout_overflow=out.overflow,
                    stderr_cut=err.overflow, timed_out=timed_out,
                    duration_sec=clock.monotonic() - started)


def _start(argv: Sequence[str], cwd: Optional[str],
           env: Optional[Mapping[str, str]]) -> tuple[subprocess.Popen, Optional[int]]:
    """The program started (under the reaper where there is one), and the
    read end of the reaper's status pipe (None without it)."""
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                 env=dict(env) if env else None, start_new_session=True, close_fds=True)
    if not USE_REAPER:
        return subprocess.Popen(list(argv), **pipes), None      # type: ignore[call-overload]
    if not os.access(argv[0], os.X_OK):       # as Popen would say, before any process starts
        raise PermissionError(13, os.strerror(13), argv[0])
    read, write = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, '-I', '-S', REAPER, str(write), *argv],
                                   pass_fds=(write,), **pipes)  # type: ignore[call-overload]
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return process, read


def _raise_unstarted(status: int, program: str) -> None:
    """OSError when the reaper could not start the program; closes the pipe."""
    try:
        said = os.read(status, 64)
    finally:
        os.close(status)
    if said:
        errno = int(said or 0)
        raise OSError(errno, os.strerror(errno), program)


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


def _stop(process: subprocess.Popen, grace_sec: float, reaper: bool) -> None:
    """SIGTERM to the group; after ``grace_sec``, every descendant killed: by
    the reaper (SIGUSR1), or with SIGKILL to the group, which is also the
    last resort when the reaper does not end in REAPER_SEC."""
    if grace_sec > 0:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(grace_sec)
            return
        except subprocess.TimeoutExpired:
            pass
    if reaper:
        try:
            process.send_signal(signal.SIGUSR1)
            process.wait(REAPER_SEC)
            return
        except subprocess.TimeoutExpired:   # stopped, or stuck: its tree is killed from here
            for pid in descendants(process.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _kill_group_leftovers(process: subprocess.Popen) -> None:
    """The leader exited: whatever it started in its group and left running
    (holding the pipes open) goes too."""
    _signal_group(process, signal.SIGKILL)
