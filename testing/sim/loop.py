"""The simulation's event loop: virtual time, a seeded choice of the next ready step, and
processes that can die between any two steps.

:class:`SimLoop` runs one ready callback per turn, chosen by its seeded ``rng`` among all
that are ready, so every interleaving of the tasks' steps can come up. When nothing is
ready, virtual time jumps to the next timer: a run of minutes of timeouts takes
milliseconds. Each task belongs to the *process* named by :data:`PROCESS` in its context
(tasks inherit it from the task that made them); a step of a dead process is dropped, not
run, so a killed process stops where it stood, as a ``kill -9`` leaves it.

:func:`deterministic` replaces, for the run, every source of difference between two runs:
wall and monotonic time (virtual), ``os.urandom`` and :mod:`random` (seeded), and threads
(``run_in_executor`` runs the function inline).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import os
import random
import sys
import time
import zlib

#: The process a task belongs to (``None``: the simulation's own driver).
PROCESS: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_process",
                                                                   default=None)
#: Virtual time starts here (Unix seconds), so stored times look like real ones.
EPOCH = 1_800_000_000.0


class SimLoop(asyncio.BaseEventLoop):
    """See the module docstring."""

    def __init__(self, rng: random.Random, still_limit: int = 200_000):
        super().__init__()
        self.rng = rng
        self.still_limit = still_limit  # steps in a row at one virtual time: a busy loop
        self._still = (0.0, 0)
        self.now = 0.0
        self.dead: set[str] = set()
        self.steps = 0
        self._dropped: list = []  # steps of dead processes, kept so nothing warns of them
        self._made = 0
        self.set_task_factory(self._task)

    # Tasks and futures hash by their number, not their address: code that keeps them in a
    # set (and cancels or gathers them in its order) then does the same in every run.

    def _number(self) -> int:
        self._made += 1
        return self._made

    def _task(self, loop, coro, context=None):
        return _SimTask(coro, loop=loop, context=context, number=self._number())

    def create_future(self):
        return _SimFuture(loop=self, number=self._number())

    def time(self) -> float:
        return self.now

    def _write_to_self(self) -> None:  # no other thread ever wakes this loop
        pass

    def _process_events(self, event_list) -> None:
        pass

    def run_in_executor(self, executor, func, *args):
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            future.set_exception(exc)
        return future

    def call_at(self, when, callback, *args, context=None) -> asyncio.TimerHandle:
        # Timers are kept as (when, number, handle): the heap compares them in C, not with
        # TimerHandle.__lt__ in Python, and timers set for one time fire in the order set.
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._scheduled, (when, self._number(), timer))
        timer._scheduled = True
        return timer

    def _run_once(self) -> None:
        scheduled = self._scheduled
        while scheduled and scheduled[0][2]._cancelled:
            heapq.heappop(scheduled)[2]._scheduled = False
        if not self._ready:
            if not scheduled:
                raise Deadlock("nothing is ready and no timer is set: every task waits")
            self.now = max(self.now, scheduled[0][0])
        while scheduled and scheduled[0][0] <= self.now:
            handle = heapq.heappop(scheduled)[2]
            handle._scheduled = False
            if not handle._cancelled:
                self._ready.append(handle)
        if not self._ready:
            return
        i = self.rng._randbelow(len(self._ready))  # randrange(n)'s draw, without its checks
        handle = self._ready[i]
        del self._ready[i]
        if handle._cancelled:
            return
        context = handle._context
        if context is not None and context.get(PROCESS) in self.dead:
            self._dropped.append(handle)
            return
        self.steps += 1
        if self._still[0] != self.now:
            self._still = (self.now, self.steps)
        elif self.steps - self._still[1] > self.still_limit:
            raise Livelock(f"{self.still_limit} steps at virtual time {self.now:.3f}: a "
                           "busy loop")
        handle._run()


class _SimTask(asyncio.Task):
    def __init__(self, coro, *, loop, context, number: int):
        self._number = number  # before the base registers the task in a (weak) set
        super().__init__(coro, loop=loop, context=context)

    def __hash__(self) -> int:
        return self._number

    def future(self) -> _SimTask:
        """As a Ray call's ``ObjectRef.future()`` (a call held for a restarting actor)."""
        return self


class _SimFuture(asyncio.Future):
    def __init__(self, *, loop, number: int):
        self._number = number
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._number

    def future(self) -> _SimFuture:
        """As a Ray call's ``ObjectRef.future()``: its answer, here this future itself."""
        return self


class Deadlock(RuntimeError):
    """Every task waits for something no task will do."""


class Livelock(RuntimeError):
    """Steps keep running, and virtual time does not move."""


def process_context(process: str | None) -> contextvars.Context:
    """A context whose tasks and callbacks belong to ``process``."""
    context = contextvars.copy_context()
    context.run(PROCESS.set, process)
    return context


def run_in(process: str | None, coro) -> asyncio.Task:
    """``coro`` as a task of ``process`` (its tasks inherit the process)."""
    return asyncio.get_running_loop().create_task(coro, context=process_context(process))


@contextlib.contextmanager
def deterministic(loop: SimLoop, seed: int, skew_s: float = 0.0):
    """Within: time is the loop's virtual time, and randomness comes from ``seed``. Each
    process's wall clock (``time.time``) is off by up to ``skew_s`` either way, its own
    amount drawn from its name (the object store's clock, the loop's, is right); monotonic
    clocks are the loop's, as no two processes compare theirs. Each
    function that calls ``os.urandom`` or ``random.Random()`` draws from a stream of its own
    (named by its file and qualified name, and a count), so a draw that only some runs make
    (a module imported lazily by the first run in a process) shifts no other, and neither
    does an edit that moves lines elsewhere."""
    saved = (time.time, time.time_ns, time.monotonic, time.monotonic_ns, time.perf_counter,
             os.urandom, random.Random, random.getstate())
    counts: dict[tuple, int] = {}

    def site_rng() -> random.Random:
        caller = sys._getframe(2)
        site = (_portable(caller.f_code.co_filename), caller.f_code.co_qualname)
        counts[site] = n = counts.get(site, 0) + 1
        return _Random(zlib.crc32(repr((seed, site, n)).encode()))

    def seeded_random(x=None):
        return _Random(site_rng().getrandbits(64) if x is None else x)

    skews: dict[str | None, float] = {None: 0.0}

    def wall() -> float:
        process = PROCESS.get()
        skew = skews.get(process)
        if skew is None:
            draw = zlib.crc32(repr((seed, "skew", process)).encode()) / 0xFFFFFFFF
            skew = skews[process] = (2 * draw - 1) * skew_s
        return EPOCH + loop.now + skew

    time.time = wall
    time.time_ns = lambda: int(wall() * 1e9)
    time.monotonic = time.perf_counter = lambda: loop.now
    time.monotonic_ns = lambda: int(loop.now * 1e9)
    os.urandom = lambda n: site_rng().randbytes(n)
    random.Random = seeded_random
    random.seed(seed)
    try:
        yield
    finally:
        (time.time, time.time_ns, time.monotonic, time.monotonic_ns, time.perf_counter,
         os.urandom, random.Random, state) = saved
        random.setstate(state)


#: Where this checkout, its venv and Python itself live: a call site is named below them, so
#: a seed runs the same in any clone (CI's, a developer's) on any machine.
_ROOTS = sorted({os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                 sys.prefix, sys.base_prefix}, key=len, reverse=True)


def _portable(filename: str) -> str:
    """``filename`` without the checkout's (or Python's) own location."""
    for root in _ROOTS:
        if filename.startswith(root + os.sep):
            return filename[len(root) + 1:]
    return filename


class _Random(random.Random):
    """``random.Random`` as it was, for :func:`deterministic`'s seeded stand-in."""

