"""Running a task in a forked child process that can be killed (TASK_ISOLATION =
'process'): docs/explanation/internals-worker.md, "A run in a child process".
"""
from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import time
from typing import Any, Callable

from kale.exceptions import ChildTaskError, TaskProcessDied, TimeLimitExceeded, describe

READ_CHUNK = 65536


def _round_trip(payload: tuple[str, Any]) -> bytes:
    """The pickled payload, if it unpickles again (exceptions with their own
    ``__init__`` often do not)."""
    data = pickle.dumps(payload)
    pickle.loads(data)
    return data


def _child(call: Callable[[], Any], write_fd: int,
           substitute: Callable[[BaseException], BaseException]) -> None:
    """Run ``call`` and report ('ok', result) or ('error', exception); never returns."""
    code = 0
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)    # the worker decides this child's fate
        try:
            payload: tuple[str, Any] = ('ok', call())
        except BaseException as exc:   # every outcome goes back to the worker
            payload = ('error', exc)
        try:
            data = _round_trip(payload)
        except Exception:
            data = pickle.dumps(('error', substitute(payload[1]))
                                if payload[0] == 'error' else ('ok', None))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _exit_description(status: int) -> str:
    if os.WIFSIGNALED(status):
        return 'killed by %s' % signal.Signals(os.WTERMSIG(status)).name
    return 'exited with code %d' % os.WEXITSTATUS(status)


def _describe_only(exc: BaseException) -> BaseException:
    return ChildTaskError(describe(exc))


def run_in_child(call: Callable[[], Any], time_limit: float,
                 substitute: Callable[[BaseException], BaseException] = _describe_only) -> Any:
    """Run ``call`` in a forked child; its result, or the exception it raised
    (``substitute(exception)`` when that cannot be sent back whole); TimeLimitExceeded
    past ``time_limit``, TaskProcessDied when it dies without reporting. Anything
    raised meanwhile (a second shutdown signal) kills the child first."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(call, write_fd, substitute)
    os.close(write_fd)
    deadline = time.monotonic() + time_limit
    chunks: list[bytes] = []
    status = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeLimitExceeded(time_limit)
            readable, _, _ = select.select([read_fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(read_fd, READ_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(read_fd)
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if not chunks:
        raise TaskProcessDied('task process %s before reporting' % _exit_description(status))
    kind, value = pickle.loads(b''.join(chunks))   # from our own child, not from the queue
    if kind == 'error':
        raise value
    return value
