"""Publishing from coroutines: ``Task.apublish`` hands the whole publish to
one of a few threads of the process, awaited, so the event loop goes on."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from typing import Callable, Optional, TypeVar

T = TypeVar('T')


#: Threads that send the publishes of coroutines (apublish): boto3 blocks.
#: An asyncio SQS client (aiobotocore) sends single messages about twice as
#: fast, but pins botocore to one release (see bench/README.md, apublish).
ASYNC_PUBLISH_THREADS = 16
_async_threads: Optional[concurrent.futures.ThreadPoolExecutor] = None
_async_threads_lock = threading.Lock()


def _forget_async_threads() -> None:
    global _async_threads
    _async_threads = None


os.register_at_fork(after_in_child=_forget_async_threads)


async def off_the_loop(call: Callable[[], T]) -> T:
    """``call()`` on one of the publishing threads, awaited: the running event
    loop goes on meanwhile. The caller's context (a trace, a settings
    override) goes along."""
    global _async_threads
    if _async_threads is None:
        with _async_threads_lock:
            if _async_threads is None:
                _async_threads = concurrent.futures.ThreadPoolExecutor(
                    ASYNC_PUBLISH_THREADS, thread_name_prefix='kale-apublish')
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_async_threads, context.run, call)
