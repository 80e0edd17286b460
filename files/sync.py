"""Running coroutines from synchronous code: the one bridge between the sync and async APIs."""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import signal
import socket
import threading

#: True in an event loop that serves one caller only (a synchronous fold's own loop): there,
#: work that a shared loop hands to a thread to stay responsive runs inline, saving the hop.
INLINE = contextvars.ContextVar("leveled_inline", default=False)


async def off_loop(fn, *args):
    """``fn(*args)`` in a worker thread, so that the loop serves others meanwhile; inline in
    a loop that serves one caller only (see :data:`INLINE`)."""
    if INLINE.get():
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


async def gather_or_cancel(*aws) -> list:
    """``asyncio.gather(*aws)``, except that the first failure cancels the others and waits
    for them to end before it is raised, as itself (``asyncio.TaskGroup`` would raise an
    exception group, changing the error a caller sees)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


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
        return run_interruptibly(coro)
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
        return run_interruptibly(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def with_sync_twins(cls):
    """Give a class a synchronous twin of each of its public ``*_async`` methods (``get`` for
    ``get_async``) that it lacks, each running the async one with its signature: one
    implementation of every operation. An abstract call of a role (:mod:`leveled_ray.roles`)
    that the twins now answer stops counting as missing."""
    for name in [n for n in dir(cls) if n.endswith("_async") and not n.startswith("_")]:
        plain = name.removesuffix("_async")
        if not hasattr(cls, plain):  # a form written (or inherited) already stays
            twin = _twin(name, getattr(cls, name))
            twin.__qualname__ = f"{cls.__qualname__}.{plain}"
            setattr(cls, plain, twin)
    abc.update_abstractmethods(cls)
    return cls


def _twin(name: str, async_form):
    def method(self, *args, **kwargs):
        return run_sync(getattr(self, name)(*args, **kwargs))

    method.__name__ = name.removesuffix("_async")
    method.__doc__ = f"Synchronous :meth:`{name}`."
    method.__signature__ = inspect.signature(async_form)
    return method


def run_interruptibly(coro):
    """``asyncio.run(coro)``, except that Ctrl-C is never slept through (see
    :class:`LoopSteps`)."""
    with asyncio.Runner() as runner:
        steps = LoopSteps(runner.get_loop(), contextvars.copy_context())
        try:
            return steps.run(coro)
        finally:
            steps.close()


class LoopSteps:
    """Runs coroutines one at a time on one event loop from synchronous code, as
    ``asyncio.Runner.run`` does: Ctrl-C while one runs (in the main thread) cancels it and
    raises ``KeyboardInterrupt``; a second Ctrl-C raises at once.

    Unlike ``Runner.run``, it does not read its SIGINT handler back after every call: that
    read formats the task, about a tenth of a fold's time for steps of a thousand rows.

    The kernel may hand a process's SIGINT to any of its threads (Ray and the object store
    client start many). Python then runs the handler only once the main thread runs Python
    code again, and a loop waiting in ``select`` would sleep through it, however long the
    wait. So while a coroutine runs, the signal also writes to a socket the loop watches
    (``signal.set_wakeup_fd``), which wakes the loop whichever thread the signal landed on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, context: contextvars.Context):
        self._loop = loop
        self._context = context
        self._watching = False
        self._task: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        """Whether a coroutine is still running: one a second Ctrl-C did not wait for."""
        return self._task is not None and not self._task.done()

    def run(self, coro):
        task = self._task = self._loop.create_task(coro, context=self._context)
        interrupted = False

        def on_sigint(signum, frame):
            nonlocal interrupted
            if interrupted:  # a second Ctrl-C does not wait for the coroutine to end
                raise KeyboardInterrupt()
            interrupted = True
            self._loop.call_soon_threadsafe(task.cancel)

        installed, wakeup_fd = _install_sigint(on_sigint), None
        try:
            if installed:
                wakeup_fd = signal.set_wakeup_fd(self._wakeup_socket().fileno(),
                                                 warn_on_full_buffer=False)
            return self._loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt() from None
            raise
        finally:
            if wakeup_fd is not None:
                signal.set_wakeup_fd(wakeup_fd)
            if installed and signal.getsignal(signal.SIGINT) is on_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    def _wakeup_socket(self) -> socket.socket:
        """The wakeup socket's write end, its read end watched by this loop."""
        read, write = _wakeup_pair()
        if not self._watching:
            self._loop.add_reader(read.fileno(), _drain, read)
            self._watching = True
        return write

    def close(self) -> None:
        """Stops watching the wakeup socket (the loop itself belongs to the caller)."""
        if self._watching:
            self._loop.remove_reader(_wakeup_pair()[0].fileno())
            self._watching = False


_WAKEUP: tuple[socket.socket, socket.socket] | None = None


def _wakeup_pair() -> tuple[socket.socket, socket.socket]:
    """The socket pair that SIGINT writes to while a coroutine runs: one for the process, as
    only the main thread installs it; making one per call would cost as much again."""
    global _WAKEUP
    if _WAKEUP is None:
        read, write = socket.socketpair()
        for end in (read, write):
            end.setblocking(False)
        _WAKEUP = (read, write)
    return _WAKEUP


def _install_sigint(on_sigint) -> bool:
    """Installs ``on_sigint`` where Ctrl-C is ours to handle: in the main thread, with
    Python's default handler in place."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return False
    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        return False
    return True


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass
