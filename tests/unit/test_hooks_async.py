"""A coroutine hook is awaited wherever its dispatcher is called from: plain
code, or code that already runs an event loop (``publish`` inside an async
web handler), which cannot start a second loop on its thread."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from kale.hooks import HookDispatcher, PublishHooks


class Recorded(PublishHooks):
    def __init__(self):
        self.threads = []

    async def after_publish(self, publication):
        await asyncio.sleep(0)
        self.threads.append((threading.current_thread().name, publication))


def test_a_coroutine_hook_is_awaited_from_plain_code():
    hook = Recorded()

    def plain():        # on a thread that runs no loop (the test's own may)
        HookDispatcher([hook])(PublishHooks.after_publish, 'p1')
        return threading.current_thread().name
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        caller = pool.submit(plain).result(30)
    assert hook.threads == [(caller, 'p1')]


def test_a_coroutine_hook_is_awaited_from_code_running_an_event_loop():
    hook = Recorded()

    async def handler():
        HookDispatcher([hook])(PublishHooks.after_publish, 'p2')
        return threading.current_thread().name
    # On a thread of its own, as in an application: the test process may
    # already run a loop on this one (the dashboard tests' browser driver).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        caller = pool.submit(asyncio.run, handler()).result(30)
    [(thread, publication)] = hook.threads
    assert publication == 'p2' and thread.startswith('kale-hook') and thread != caller
