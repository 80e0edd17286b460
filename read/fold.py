"""Running a query's async generator from synchronous code, and ending it cleanly.

A synchronous query runs its async generator on a private event loop, one batch per step, and
hands out the batch's items. The :class:`Fold` it returns releases what the query holds (its
snapshot) however the caller stops: exhausted, broken out of, closed, or never started.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator

from ..files.sync import inline_context


def iterate(make: Callable[[], AsyncIterator], *, flatten: bool,
            on_close: Callable[[], None] | None = None) -> Fold:
    """A synchronous iterator over an async generator of batches, run on a private event loop.
    ``flatten`` hands out the items of each batch. Closing it (or breaking out of a ``for``
    loop over it) stops the generator and calls ``on_close``."""
    once = _Once(on_close)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return Fold(_iterate(make, flatten, once), once, _closer())
    once()
    raise RuntimeError("called a synchronous query inside an event loop: use its *_async "
                       "form there")


class _Once:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn()


class Fold:
    """The iterator a query returns. It ends, and releases what it holds (its snapshot), when
    it is exhausted, when :meth:`close` is called, at the end of a ``with`` block, or once
    nothing refers to it (breaking out of a ``for`` loop)."""

    def __init__(self, gen: Iterator, release: _Once, dropped: queue.SimpleQueue):
        self._gen = gen
        self._release = release
        self._dropped = dropped

    def __iter__(self) -> Fold:
        return self

    def __next__(self):
        return next(self._gen)

    def close(self) -> None:
        try:
            self._gen.close()  # a started generator releases in its finally block
        finally:
            self._release()  # one never started releases here

    def __enter__(self) -> Fold:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close(): the closer thread ends it. Never here: the garbage
        # collector may run this anywhere, even inside threading's own locks, where running
        # the fold's event loop (which starts a thread as it closes) would deadlock.
        self._dropped.put((self._gen, self._release))


_DROPPED: queue.SimpleQueue | None = None
_DROPPED_LOCK = threading.Lock()


def _closer() -> queue.SimpleQueue:
    """The queue of dropped folds, and the daemon thread that closes them (started with the
    first fold, in ordinary code). ``SimpleQueue.put`` may be called from ``__del__``."""
    global _DROPPED
    with _DROPPED_LOCK:
        if _DROPPED is None:
            _DROPPED = queue.SimpleQueue()
            threading.Thread(target=_close_dropped, args=(_DROPPED,), daemon=True,
                             name="lr-fold-closer").start()
        return _DROPPED


def _close_dropped(dropped: queue.SimpleQueue) -> None:
    while True:
        gen, release = dropped.get()
        try:
            try:
                gen.close()  # a started generator releases in its finally block
            finally:
                release()
        except Exception:
            pass  # the snapshot expires on its own


def _iterate(make, flatten, on_close: _Once):
    runner = asyncio.Runner()
    context = inline_context()  # this loop serves this fold alone: no hops to threads
    agen = None
    try:
        agen = context.run(make)
        while True:
            try:
                batch = _run_step(runner.get_loop(), agen.__anext__(), context)
            except StopAsyncIteration:
                return
            if flatten:
                yield from batch
            else:
                yield batch
    finally:
        try:
            if agen is not None:
                runner.run(agen.aclose(), context=context)
            runner.close()  # also stops the loop's worker threads
        finally:
            on_close()


def _run_step(loop: asyncio.AbstractEventLoop, coro, context):
    """One step of a fold on its own loop, as ``asyncio.Runner.run`` runs it: Ctrl-C while
    it runs (in the main thread) cancels it and raises ``KeyboardInterrupt``. Runner.run
    reads its SIGINT handler back after every call, and that read formats the task: about a
    tenth of a fold's time, for steps of a thousand rows."""
    task = loop.create_task(coro, context=context)
    interrupted = installed = False

    def on_sigint(signum, frame):
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C does not wait for the step to end
            raise KeyboardInterrupt()
        interrupted = True
        loop.call_soon_threadsafe(task.cancel)

    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, on_sigint)
            installed = True
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt() from None
        raise
    finally:
        if installed and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)


async def aiterate(make: Callable[[], AsyncIterator], *, flatten: bool,
                   on_close: Callable[[], object] | None = None) -> AsyncIterator:
    """The ``*_async`` twin of :func:`iterate`: an async generator; ``on_close`` may be async."""
    try:
        async with contextlib.aclosing(make()) as agen:
            async for batch in agen:
                if flatten:
                    for item in batch:
                        yield item
                else:
                    yield batch
    finally:
        if on_close is not None:
            done = on_close()
            if asyncio.iscoroutine(done):
                await done
