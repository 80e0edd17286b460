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
import threading
from collections.abc import AsyncIterator, Callable, Iterator

from ..files.sync import LoopSteps, inline_context


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
    steps: LoopSteps | None = None
    agen = None

    def cleanup() -> None:
        with contextlib.ExitStack() as later:  # runs these last first, whatever fails
            if on_close is not None:
                later.callback(on_close)
            later.callback(runner.close)  # also stops the loop's worker threads
            if steps is not None:
                later.callback(steps.close)
            # A step a second Ctrl-C left running still holds the generator: closing the
            # runner cancels that step, then closes the generator.
            if agen is not None and not (steps is not None and steps.running):
                runner.run(agen.aclose(), context=context)

    try:
        yield None  # primed
        agen = context.run(make)
        steps = LoopSteps(runner.get_loop(), context)
        while True:
            try:
                batch = steps.run(agen.__anext__())
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
