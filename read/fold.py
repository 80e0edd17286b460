"""Running a query's async generator from synchronous code, and ending it cleanly.

A synchronous query runs its async generator on a private event loop, one batch per step, and
hands out the batch's items. The :class:`Fold` it returns releases what the query holds (its
snapshot) however the caller stops: exhausted, broken out of, closed, or never started.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
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
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        closing: list[bool] = []  # set by Fold.close: then the batches close right here
        return Fold(_batches(make, on_close, _closer(), closing), flatten, closing)
    if on_close is not None:
        on_close()
    raise RuntimeError("called a synchronous query inside an event loop: use its *_async "
                       "form there")


class Fold:
    """The iterator a query returns. It ends, and releases what it holds (its snapshot), when
    it is exhausted, when :meth:`close` is called, at the end of a ``with`` block, or once
    nothing refers to it (breaking out of a ``for`` loop).

    A ``for`` loop iterates a C-level chain over the batches (``iter(fold)``), with no Python
    frame per item: for small rows that frame was a tenth of a fold's time."""

    def __init__(self, batches: Iterator, flatten: bool, closing: list[bool]):
        self._batches = batches
        self._closing = closing
        self._items = itertools.chain.from_iterable(batches) if flatten else batches

    def __iter__(self) -> Iterator:
        return self._items

    def __next__(self):
        return next(self._items)

    def close(self) -> None:
        self._closing.append(True)
        self._batches.close()

    def __enter__(self) -> Fold:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_DROPPED: queue.SimpleQueue | None = None
_DROPPED_LOCK = threading.Lock()


def _closer() -> queue.SimpleQueue:
    """The queue of cleanups of dropped folds, and the daemon thread that runs them (started
    with the first fold, in ordinary code). ``SimpleQueue.put`` may be called anywhere."""
    global _DROPPED
    with _DROPPED_LOCK:
        if _DROPPED is None:
            _DROPPED = queue.SimpleQueue()
            threading.Thread(target=_close_dropped, args=(_DROPPED,), daemon=True,
                             name="lr-fold-closer").start()
        return _DROPPED


def _close_dropped(dropped: queue.SimpleQueue) -> None:
    while True:
        cleanup = dropped.get()
        try:
            cleanup()
        except Exception:
            pass  # the snapshot expires on its own


def _batches(make, on_close, dropped: queue.SimpleQueue, closing: list[bool]) -> Iterator:
    """The batches of ``make()``, one event-loop step each. Primed (run to its first
    ``yield``) before it is handed out, so that however it ends its ``finally`` runs: also
    when it is dropped before it started."""
    gen = _run_batches(make, on_close, dropped, closing)
    next(gen)
    return gen


def _run_batches(make, on_close, dropped: queue.SimpleQueue, closing: list[bool]):
    runner = asyncio.Runner()
    context = inline_context()  # this loop serves this fold alone: no hops to threads
    agen = None

    def cleanup() -> None:
        try:
            if agen is not None:
                runner.run(agen.aclose(), context=context)
            runner.close()  # also stops the loop's worker threads
        finally:
            if on_close is not None:
                on_close()

    try:
        yield None  # primed
        agen = context.run(make)
        while True:
            try:
                batch = _run_step(runner.get_loop(), agen.__anext__(), context)
            except StopAsyncIteration:
                return
            yield batch
    except GeneratorExit:
        if not closing:
            # Dropped: the garbage collector may be finalizing this anywhere, even inside
            # threading's own locks, where running the event loop (which starts a thread as
            # it closes) would deadlock. The closer thread ends it.
            dropped.put(cleanup)
            cleanup = None
        raise
    finally:
        if cleanup is not None:
            cleanup()


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
