"""Running one executor program: arguments in on standard input, the result
out on standard output, standard error kept, and everything it started ended
at the time limit, its whole tree killed from the worker whatever it did to its
reaper (docs/explanation/internals-workflow.md, "Running one program", "Killing the tree")."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Iterable, Mapping, Optional, Sequence

from kale.clock import SYSTEM_CLOCK, Clock
from kale.executors.reaper import Proc, kill_all, snapshot, with_descendants

logger = logging.getLogger(__name__)

#: Bytes read from a pipe at a time.
CHUNK = 65536
#: The environment variable that marks every process of one run.
COOKIE_VARIABLE = 'KALE_RUN_COOKIE'
#: Seconds spent killing a tree at most (a process stuck in the kernel dies
#: when it comes out of it; one that never does is left, and logged).
KILL_SEC = 10.0


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
        read = getattr(self.pipe, 'read1', self.pipe.read)
        try:
            for chunk in iter(lambda: read(CHUNK), b''):
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
            pass
        finally:
            with contextlib.suppress(OSError):
                self.pipe.close()


#: The reaper, run as a script (kale.executors.reaper).
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'reaper.py')
#: Whether programs run under the reaper (it needs Linux's child subreapers).
USE_REAPER = sys.platform.startswith('linux')
#: Seconds the reaper gets to reap its killed tree and exit, before SIGKILL.
REAPER_SEC = 2.0
#: Longest one wait of the caller for its run (an interruption, the
#: guard's, is raised in the caller between two of them).
JOIN_SEC = 0.05


def run_program(argv: Sequence[str], stdin: bytes, time_limit_sec: float, *,
                cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                stdout_max_bytes: int = 16 * 1024 * 1024, stderr_max_bytes: int = 64 * 1024,
                kill_grace_sec: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> Finished:
    """Run ``argv`` with ``stdin`` on its standard input until it exits or its
    time limit passes (then it and all it started are killed); OSError when
    it cannot be started."""
    started = clock.monotonic()
    cookie = secrets.token_hex(16)
    process, status = _start(argv, cwd, _environment(env, cookie))
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    run = _Run(process, status, cookie, time_limit_sec, kill_grace_sec)
    out = _Keep(process.stdout, stdout_max_bytes, keep_last=False)
    err = _Keep(process.stderr, stderr_max_bytes, keep_last=True)
    feeder = threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True,
                              name='kale-executor-stdin')
    feeder.start()
    run.wait()
    for keeper in (out, err):
        keeper.thread.join(max(1.0, kill_grace_sec))
    feeder.join(1.0)
    if run.errno:
        raise OSError(run.errno, os.strerror(run.errno), argv[0])
    code = process.returncode
    if code is None:                    # a reaper that SIGKILL did not end (stuck in the kernel)
        code = -signal.SIGKILL
    return Finished(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                    stdout=bytes(out.data), stderr=bytes(err.data), stdout_overflow=out.overflow,
                    stderr_cut=err.overflow, timed_out=run.timed_out,
                    duration_sec=clock.monotonic() - started)


def _environment(env: Optional[Mapping[str, str]], cookie: str) -> Optional[dict[str, str]]:
    """The program's environment (the worker's without ``env``), marked with
    the run's cookie where the tree is killed by it (see kill_tree)."""
    if not USE_REAPER:
        return dict(env) if env else None
    return {**(env or os.environ), COOKIE_VARIABLE: cookie}


def _start(argv: Sequence[str], cwd: Optional[str],
           env: Optional[Mapping[str, str]]) -> tuple[subprocess.Popen, Optional[int]]:
    """The program started (under the reaper where there is one), and the
    read end of the reaper's status pipe (None without it)."""
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                 env=env, start_new_session=True, close_fds=True)
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


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        with contextlib.suppress(OSError, ValueError):     # it exited without reading it all
            pipe.write(data)
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


class _Run:
    """A run followed to its end on a thread of its own, which the caller's
    interruption hurries but cannot cut short (the docs page the module names)."""

    def __init__(self, process: subprocess.Popen, status: Optional[int], cookie: str,
                 time_limit_sec: float, kill_grace_sec: float):
        self.process = process
        self.status = status
        self.cookie = cookie
        self.timed_out = False
        #: The reaper could not start the program: its errno.
        self.errno = 0
        self.hurry = False
        self.thread = threading.Thread(target=self._follow, args=(time_limit_sec, kill_grace_sec),
                                       name='kale-executor-run')
        self.thread.start()

    def wait(self) -> None:
        """Until the run is over and its tree ended."""
        try:
            while self.thread.is_alive():
                self.thread.join(JOIN_SEC)
        finally:
            self.hurry = True

    def _follow(self, time_limit_sec: float, kill_grace_sec: float) -> None:
        try:
            if not self._exits_within(time_limit_sec) and not self._hurried():
                self.timed_out = True
                _signal_group(self.process, signal.SIGTERM)
                self._exits_within(kill_grace_sec)
            self._end()
        except BaseException:
            logger.exception('ending the executor run of process %d failed', self.process.pid)
        finally:
            if self.status is not None:
                os.close(self.status)

    def _hurried(self) -> bool:
        """The caller was interrupted, or the worker is exiting (its main
        thread is over): the tree is ended now, not at the time limit."""
        return self.hurry or not threading.main_thread().is_alive()

    def _exits_within(self, seconds: float) -> bool:
        """Whether the process exits within ``seconds`` (the wait is cut
        short when the caller is interrupted)."""
        deadline = time.monotonic() + max(0.0, seconds)
        pause = 0.0005
        while not self._hurried():
            if self.process.poll() is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pause = min(pause * 2, left, JOIN_SEC)
            time.sleep(pause)
        return self.process.poll() is not None

    def _end(self) -> None:
        if self.status is None:
            _signal_group(self.process, signal.SIGKILL)     # it, or what it left in its group
            _wait(self.process, REAPER_SEC)
            return
        if self.process.poll() is None:
            kill_tree(self.process.pid, False, self.cookie)
            self._reap_reaper()
        if self.process.returncode is not None and not self._reaper_left_nothing():
            kill_tree(self.process.pid, True, self.cookie)

    def _reap_reaper(self) -> None:
        """Its tree killed, the reaper (stopped, perhaps) reaps it and exits."""
        with contextlib.suppress(OSError):
            self.process.send_signal(signal.SIGCONT)
        if not _wait(self.process, REAPER_SEC):
            self.process.kill()
            if not _wait(self.process, REAPER_SEC):
                logger.warning('executor reaper %d does not end after SIGKILL',
                               self.process.pid)

    def _reaper_left_nothing(self) -> bool:
        """What the reaper said: ``+`` once it killed and reaped all of its
        tree; an errno when the program could not start."""
        assert self.status is not None
        os.set_blocking(self.status, False)
        try:
            said = os.read(self.status, 64)
        except BlockingIOError:         # a process forked from the worker holds the pipe
            said = b''
        if said.isdigit():
            self.errno = int(said)
        return said == b'+' or said.isdigit()


def _wait(process: subprocess.Popen, seconds: float) -> bool:
    try:
        process.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


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
