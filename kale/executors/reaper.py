"""The parent of everything one executor program starts (Linux), so that none
of it outlives the run: run as a script, standard library only
(docs/explanation/internals-workflow.md, "The reaper")."""
import collections
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
#: Seconds spent killing and reaping leftovers at most (a process stuck in
#: the kernel dies when it comes out; one that never does is left).
CLEANUP_SEC = 10.0
#: Written on the status pipe once no descendant is left.
LEFT_NOTHING = b'+'
#: Signals the program gets back at their default disposition.
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGPIPE,
                   signal.SIGXFSZ)


#: One process as ``/proc/PID/stat`` shows it (running: neither a zombie nor dead).
Proc = collections.namedtuple('Proc', 'parent session running')


def snapshot() -> dict[int, Proc]:
    """Every process of the system, by pid."""
    found = {}
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


def with_descendants(roots: set[int], procs: dict[int, Proc]) -> set[int]:
    """``roots`` and every process whose chain of parents reaches one of them."""
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


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def reap(program: int, status: int | None) -> int | None:
    """Reap every child that has ended; the program's status once it has."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == program:
            status = code


def _become_subreaper(status_fd: int) -> None:
    """Adopt the program's orphaned descendants, and leave SIGTERM and SIGINT
    to the program."""
    os.set_inheritable(status_fd, False)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)      # without it: the tree as it stands
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_program(program: int) -> int | None:
    """The program's status once it has ended (None when the cleanup reaped it)."""
    try:
        return os.waitpid(program, 0)[1]
    except ChildProcessError:           # reaped by the cleanup below
        return None


def _clean_up(program: int, status: int | None) -> tuple[int | None, bool]:
    """Kill and reap the descendants left, for CLEANUP_SEC at most; the
    program's status, and whether no descendant is left."""
    deadline = time.monotonic() + CLEANUP_SEC
    while True:
        left = with_descendants({os.getpid()}, snapshot()) - {os.getpid()}
        if not left or time.monotonic() >= deadline:
            return reap(program, status), not left
        kill_all(left)
        time.sleep(0.005)
        status = reap(program, status)


def _exit_as(status: int | None) -> int:
    """End as the program did: its exit code, or the signal that killed it."""
    if status is None or os.WIFEXITED(status):
        return os.WEXITSTATUS(status) if status is not None else 1
    signum = os.WTERMSIG(status)
    signal.signal(signum, signal.SIG_DFL)
    sys.stdout.flush()
    os.kill(os.getpid(), signum)
    return 128 + signum


def main(argv: list[str]) -> int:
    status_fd, program_argv = int(argv[1]), argv[2:]
    _become_subreaper(status_fd)
    try:
        program = os.posix_spawn(program_argv[0], program_argv, os.environ,
                                 setsigdef=DEFAULT_SIGNALS)
    except OSError as exc:
        os.write(status_fd, str(exc.errno or 0).encode())
        return 127
    status, left_nothing = _clean_up(program, _wait_program(program))
    if left_nothing:
        os.write(status_fd, LEFT_NOTHING)
    return _exit_as(status)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
