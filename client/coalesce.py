"""Client-side group commit: the single writes of one process travel to the Bookie together.

Each ``put`` or ``delete`` (from any thread or event loop of the process) becomes a *part*: its
changes and values, and a future for its first SQN. One call is in flight per handle at a time.
A part that arrives while it is in flight waits, and when the call returns, every waiting part
goes in the next one, up to ``max_changes`` changes and ``max_bytes`` bytes. So a lone writer
pays nothing extra, many concurrent writers share one Ray call and one journal write, and parts
reach the Bookie in the order they were submitted, which keeps every caller's order.

When a call of ``n`` parts returns, its ``n`` callers wake one by one (each thread, or each
coroutine, in turn), and the first to write again would otherwise go alone, leaving the rest to
the call after it. So the next call *lingers*: a helper thread sends it once ``n`` parts wait,
once no part has come for ``gap_s``, or after at most ``linger_s``. A lone writer (calls of one
part) never lingers.

A thread that finds no call in flight sends its part and, given ``wait`` (Ray's ``ray.get``),
waits for that call itself rather than for a future that Ray's callback thread completes:
a lone writer's answer comes about 0.1 ms sooner here (docs: "The time of one call"). The
parts that arrive meanwhile go in the next call, as above.

The Bookie checks each part's conditions on its own (see
:func:`leveled_ray.codec.conditions.check_parts`): a failed part fails alone, and an error of
the whole call (fencing, a failed journal write) reaches every part of it. A transaction's
commit is one part (its writes and checks); its reads of versions travel likewise, through a
:class:`Coalescer` of their own (each part a transaction's keys, read as of one moment).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, NamedTuple

from ..actors.remote import unwrap


class Part(NamedTuple):
    """One caller's changes, with their values, waiting to be sent. A thread waits on a
    :class:`concurrent.futures.Future`; a coroutine on an :class:`asyncio.Future` of its
    ``loop``."""

    changes: list
    values: list
    nbytes: int
    future: Future | asyncio.Future
    loop: asyncio.AbstractEventLoop | None
    #: A transaction's :class:`~leveled_ray.codec.conditions.Depends`, sent with the call.
    deps: Any = None

    def take(self) -> bool:
        """Mark the part sent, unless its caller gave up waiting (a cancelled asyncio wait):
        then nothing of it is written."""
        if self.loop is None:
            return self.future.set_running_or_notify_cancel()
        return not self.future.cancelled()


class Coalescer:
    """Queues parts and sends them with ``send(parts)``, which starts one call and returns a
    :class:`concurrent.futures.Future` of each part's result (a write's first SQN), or the
    exception that part alone raised."""

    def __init__(self, send: Callable[[list[Part]], Any], *, max_changes: int,
                 max_bytes: int, linger_s: float = 0.01, gap_s: float = 0.001,
                 future: Callable[[Any], Future] = lambda call: call,
                 wait: Callable[[Any], list] | None = None):
        """``send(parts)`` starts a call; ``future(call)`` is a future of its results (by
        default the call is one), and ``wait(call)``, if given, waits for them in the
        calling thread (see the module's docstring)."""
        self._send_call, self._future, self._wait = send, future, wait
        self.max_changes, self.max_bytes = max_changes, max_bytes
        self.linger_s, self.gap_s = linger_s, gap_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Part] = deque()
        self._busy = False  # a call is in flight (or lingering)
        self._linger_for = 0  # parts the lingering call waits for; 0: none lingers
        self._lingerer: threading.Thread | None = None
        self.counters = {"calls": 0, "parts": 0, "lingered": 0}

    def submit(self, changes: list, values: list, nbytes: int, *,
               loop: asyncio.AbstractEventLoop | None = None,
               deps: Any = None) -> Future | asyncio.Future:
        """Queue one caller's changes; the future gives their first SQN. With ``loop``, an
        asyncio future of that loop (the caller's running loop), else a thread's future."""
        future = Future() if loop is None else loop.create_future()
        part = Part(changes, values, nbytes, future, loop, deps)
        with self._lock:
            self._queue.append(part)
            if self._busy:
                if self._linger_for and len(self._queue) >= self._linger_for:
                    self._changed.notify()
                return part.future
            self._busy = True
            batch = self._take()
        if loop is None and self._wait is not None:
            self._send_and_wait(batch)
        else:
            self._send(batch)
        return part.future

    def _take(self) -> list[Part]:
        """The next call's parts, oldest first (under the lock). A part whose caller gave up
        (a cancelled asyncio wait) before it was sent is dropped: nothing of it is written."""
        batch, changes, nbytes = [], 0, 0
        while self._queue and (not batch or (
                changes + len(self._queue[0].changes) <= self.max_changes
                and nbytes + self._queue[0].nbytes <= self.max_bytes)):
            part = self._queue.popleft()
            if part.take():
                batch.append(part)
                changes += len(part.changes)
                nbytes += part.nbytes
        return batch

    def _start(self, batch: list[Part]) -> Any:
        """Start the call of ``batch``; ``None`` if it could not be sent (its parts failed,
        and the next batch is the caller's to send)."""
        self.counters["calls"] += 1
        self.counters["parts"] += len(batch)
        try:
            return self._send_call(batch)
        except BaseException as exc:  # nothing was sent: these parts fail
            self._deliver(batch, None, exc)
            return None

    def _send(self, batch: list[Part]) -> None:
        while batch:
            call = self._start(batch)
            if call is None:
                batch = self._next()
                continue
            self._future(call).add_done_callback(
                lambda done, sent=batch: self._complete(sent, done))
            return
        # Every part was cancelled: the queue is empty and nothing is in flight.

    def _send_and_wait(self, batch: list[Part]) -> None:
        """Send ``batch`` and wait for its call in this thread, then send what came meanwhile.
        Interrupted (Ctrl-C), the call completes as any other, and the interrupt goes on."""
        assert self._wait is not None
        call = self._start(batch) if batch else None
        if call is None:
            self._send(self._next())
            return
        try:
            results, error = self._wait(call), None
        except Exception as exc:
            results, error = None, unwrap(exc)
        except BaseException:
            self._future(call).add_done_callback(
                lambda done, sent=batch: self._complete(sent, done))
            raise
        self._settled(batch, results, error)

    def _complete(self, batch: list[Part], done: Future) -> None:
        try:
            results, error = done.result(), None
        except BaseException as exc:
            results, error = None, unwrap(exc)
        self._settled(batch, results, error)

    def _settled(self, batch: list[Part], results: list | None,
                 error: BaseException | None) -> None:
        """A call's outcome: to its parts, then the next call goes (or lingers)."""
        self._deliver(batch, results, error)
        if len(batch) > 1 and self.linger_s > 0:
            with self._lock:
                self._linger_for = len(batch)
                if self._lingerer is None:
                    self._lingerer = threading.Thread(target=self._linger, daemon=True,
                                                      name="leveled-ray write coalescer")
                    self._lingerer.start()
                self._changed.notify()
            return
        self._send(self._next())

    def _linger(self) -> None:
        """The helper thread: send each lingering call once its callers are back, or once
        they stop coming."""
        while True:
            with self._lock:
                while not self._linger_for:
                    self._changed.wait()
                deadline = time.monotonic() + self.linger_s
                while len(self._queue) < self._linger_for:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    seen = len(self._queue)
                    self._changed.wait(min(left, self.gap_s))
                    if len(self._queue) == seen:
                        break  # nobody came for gap_s: the rest are not coming soon
                self._linger_for = 0
                self.counters["lingered"] += 1
            self._send(self._next())

    def _next(self) -> list[Part]:
        with self._lock:
            batch = self._take()
            self._busy = bool(batch)
            return batch

    @staticmethod
    def _deliver(batch: list[Part], results: list | None, error: BaseException | None) -> None:
        """Each part's outcome to its caller: threads one by one, and the coroutines of each
        event loop in one step of that loop (one wake-up, not one per part)."""
        by_loop: dict = {}
        for i, part in enumerate(batch):
            outcome = error if results is None else results[i]
            if part.loop is None:
                _settle(part.future, outcome)
            else:
                by_loop.setdefault(part.loop, []).append((part.future, outcome))
        for loop, outcomes in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, outcomes)
            except RuntimeError:  # the loop was closed: nobody waits any more
                pass


def _settle(future, outcome) -> None:
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:  # an asyncio caller cancelled its wait after the part was sent
        pass


def _settle_all(outcomes: list) -> None:
    for future, outcome in outcomes:
        _settle(future, outcome)
