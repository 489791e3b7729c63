"""A fleet of `kale worker` processes that the chaos run kills, stops and replaces.

Every exit is accounted for: one the run caused (kill -9, SIGTERM), one the
killer task caused (it logs its pid before it kills its worker), or a crash
nobody asked for.
"""
from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence


@dataclasses.dataclass
class Exit:
    pid: int
    code: int
    cause: str          # 'kill -9', 'SIGTERM', 'killer task', 'unexpected'
    log_path: str


class Fleet:
    """Keeps ``size`` worker processes running."""

    def __init__(self, size: int, env: dict[str, str], cwd: str, log_dir: str,
                 queues: str, rng: random.Random, pools: Sequence[str] = ('serial',)):
        self.size = size
        #: The pools the workers run in turn (worker n: pools[n % len(pools)]).
        self.pools = list(pools)
        self.env = env
        self.cwd = cwd
        self.log_dir = log_dir
        self.queues = queues
        self.rng = rng
        self.workers: dict[int, tuple[subprocess.Popen, str]] = {}
        self.asked: dict[int, str] = {}         # pid -> what the run did to it
        self.exits: list[Exit] = []
        self.started = 0
        self.born: dict[int, float] = {}

    def start_one(self) -> int:
        self.started += 1
        log_path = os.path.join(self.log_dir, 'worker-%03d.log' % self.started)
        pool = self.pools[self.started % len(self.pools)]
        with open(log_path, 'w') as log:
            process = subprocess.Popen(
                [sys.executable, '-m', 'kale', 'worker', '--queues', self.queues,
                 '--log-level', 'INFO', '--pool', pool], cwd=self.cwd, env=self.env, stdout=log,
                stderr=subprocess.STDOUT)
        self.workers[process.pid] = (process, log_path)
        self.born[process.pid] = time.monotonic()
        return process.pid

    def fill(self) -> None:
        while len(self.workers) < self.size:
            self.start_one()

    def _pick(self) -> Optional[subprocess.Popen]:
        """A worker that has been running for a second at least (before its
        interpreter is up, no program can catch a signal)."""
        now = time.monotonic()
        alive = [p for p, _ in self.workers.values() if p.poll() is None
                 and p.pid not in self.asked and now - self.born[p.pid] >= 1.0]
        return self.rng.choice(alive) if alive else None

    def kill9(self) -> Optional[int]:
        process = self._pick()
        if process is not None:
            self.asked[process.pid] = 'kill -9'
            process.send_signal(signal.SIGKILL)
            return process.pid
        return None

    def sigterm(self) -> Optional[int]:
        process = self._pick()
        if process is not None:
            self.asked[process.pid] = 'SIGTERM'
            process.send_signal(signal.SIGTERM)
            return process.pid
        return None

    def reap(self, killer_pids: Callable[[], set[int]], replace: bool = True) -> list[Exit]:
        """Account for workers that exited since the last call; start replacements."""
        found = []
        for pid, (process, log_path) in list(self.workers.items()):
            code = process.poll()
            if code is None:
                continue
            del self.workers[pid]
            asked = self.asked.pop(pid, None)
            if asked == 'kill -9' and code == -signal.SIGKILL:
                cause = asked
            elif asked == 'SIGTERM' and code == 0:
                cause = asked
            elif code == -signal.SIGKILL and pid in killer_pids():
                cause = 'killer task'
            else:
                cause = 'unexpected'
            found.append(Exit(pid, code, cause, log_path))
        self.exits.extend(found)
        if replace:
            self.fill()
        return found

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every worker and wait for each (their exits are reaped as usual)."""
        for pid, (process, _) in self.workers.items():
            if process.poll() is None:
                self.asked[pid] = 'SIGTERM'
                process.send_signal(signal.SIGTERM)
        for process, _ in list(self.workers.values()):
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
