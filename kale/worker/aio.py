"""The worker's own event loop, on a thread of its own, where every coroutine task
and hook runs (docs/explanation/internals-worker.md, "The worker's event loop").
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Coroutine, Optional, TypeVar

logger = logging.getLogger(__name__)

#: How often the loop stamps the time while it runs freely.
TICK_SEC = 0.1

T = TypeVar('T')


class TaskLoop:
    """An event loop running on a daemon thread until :meth:`close`."""

    def __init__(self, name: str = 'kale-loop'):
        self.loop = asyncio.new_event_loop()
        self._tick_at = time.monotonic()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._tick)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                left = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
                for task in left:
                    task.cancel()
                if left:
                    self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    def _tick(self) -> None:
        self._tick_at = time.monotonic()
        self.loop.call_later(TICK_SEC, self._tick)

    def blocked_sec(self) -> float:
        """How long the loop has not been able to run its own callbacks (0.0
        while it keeps up)."""
        late = time.monotonic() - self._tick_at - TICK_SEC
        return late if late > 0.0 else 0.0

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> 'concurrent.futures.Future[T]':
        """Start ``coroutine`` on the loop; its future is set when it ends."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Call ``function(*args)`` on the loop's thread, soon."""
        self.loop.call_soon_threadsafe(function, *args)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: Optional[float] = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (raising what
        it raised); TimeoutError after ``timeout`` seconds, the coroutine then
        left running."""
        return self.submit(coroutine).result(timeout)

    def run_hook(self, awaitable: Awaitable[T], timeout: float) -> T:
        """A hook's awaitable, run to its end on the loop from another thread."""
        async def wait() -> T:
            return await awaitable
        return self.run(wait(), timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop (cancelling what still runs on it) and end its thread."""
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:        # closed meanwhile
            return
        self._thread.join(timeout)
