"""Running coroutines from synchronous code: the one bridge between the sync and async APIs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars

#: True in an event loop that serves one caller only (a synchronous fold's own loop): there,
#: work that a shared loop hands to a thread to stay responsive runs inline, saving the hop.
INLINE = contextvars.ContextVar("leveled_inline", default=False)


async def off_loop(fn, *args):
    """``fn(*args)`` in a worker thread, so that the loop serves others meanwhile; inline in
    a loop that serves one caller only (see :data:`INLINE`)."""
    if INLINE.get():
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def inline_context() -> contextvars.Context:
    """A context for the tasks of a loop that serves one caller only."""
    context = contextvars.copy_context()
    context.run(INLINE.set, True)
    return context


def run_sync(coro):
    """Run a coroutine from synchronous code (refusing, clearly, inside a running loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called the synchronous API inside an event loop: use the *_async "
                       "methods there")


def run_blocking(coro):
    """Run a coroutine to its end and return its result, blocking the caller, even from
    inside a running event loop (then on a thread of its own): for calls that block anyway,
    as opening a store does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def with_sync_twins(cls):
    """Give a class a synchronous twin of each of its public ``*_async`` methods (``get`` for
    ``get_async``) that it lacks, each running the async one: one implementation of every
    operation."""
    for name in [n for n in dir(cls) if n.endswith("_async") and not n.startswith("_")]:
        plain = name.removesuffix("_async")
        if not hasattr(cls, plain):  # a form written (or inherited) already stays
            setattr(cls, plain, _twin(name))
    return cls


def _twin(name: str):
    def method(self, *args, **kwargs):
        return run_sync(getattr(self, name)(*args, **kwargs))

    method.__name__ = name.removesuffix("_async")
    method.__doc__ = f"Synchronous :meth:`{name}`."
    return method
