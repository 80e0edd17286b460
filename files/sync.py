"""Running coroutines from synchronous code: the one bridge between the sync and async APIs."""

from __future__ import annotations

import asyncio


def run_sync(coro):
    """Run a coroutine from synchronous code (refusing, clearly, inside a running loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called the synchronous API inside an event loop: use the *_async "
                       "methods there")
