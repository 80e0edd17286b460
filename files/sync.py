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
from collections.abc import Callable
from typing import Any, TypeVar, overload

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
    except GeneratorExit:  # this coroutine is discarded unfinished (its loop may be closed)
        raise
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
    """Run a coroutine to its end and return its result, blocking the caller: the one bridge
    from synchronous code. Inside a running event loop (a notebook's, say), it runs on a
    thread of its own, blocking that loop as any blocking call would."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_interruptibly(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run_interruptibly, coro).result()


class PrivateLoop:
    """The event loop one object's synchronous calls share, for an object whose state lives
    on a loop between calls (a listener's renewal task, its long-polling calls). Made on the
    first call; ended by :meth:`close` (or, once nothing refers to it, by the loop's own
    finalizer)."""

    def __init__(self):
        self._runner: asyncio.Runner | None = None
        self._steps: LoopSteps | None = None

    def run(self, coro):
        """``coro`` run to its end on this loop (see :func:`run_sync` for a running loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._runner is None:
                self._runner = asyncio.Runner()
                self._steps = LoopSteps(self._runner.get_loop(), contextvars.copy_context())
            return self._steps.run(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(self.run, coro).result()

    def close(self) -> None:
        """Ends the loop (its tasks are cancelled); a later call makes a new one."""
        if self._runner is not None:
            self._steps.close()
            self._runner.close()
            self._runner = self._steps = None


#: A plan method, as a type checker sees it: its declared answer is the synchronous form's (the
#: role declares the ``*_async`` form), so a checker shows every call as a user makes it.
F = TypeVar("F", bound=Callable[..., Any])


@overload
def two_forms(build: F, *, iterates: bool = False) -> F: ...


@overload
def two_forms(build: None = None, *, iterates: bool = False) -> Callable[[F], F]: ...


def two_forms(build=None, *, iterates: bool = False):
    """Mark a method as defined by its plan, for :func:`with_sync_twins` to make its two forms
    from: ``build(self, ...)`` checks the arguments and returns a plan, whose ``run()`` is the
    synchronous form's answer and ``run_async()`` the async form's: an awaitable, or with
    ``iterates`` an async iterator.

    For calls whose work is elsewhere (one Ray call, a query's generator), so that the
    synchronous form waits for it directly: a ``ray.get`` answered about 0.35 ms sooner than
    the same call awaited on an event loop, on a 2-core machine whose bare round trip is
    1 to 1.5 ms."""
    def mark(build):
        build.two_forms = "iterator" if iterates else "awaitable"
        return build
    return mark if build is None else mark(build)


def with_sync_twins(cls):
    """Make the twins of a class: ``name`` and ``name_async`` from each :func:`two_forms`
    method, then a synchronous twin of each public ``*_async`` method (``get`` for
    ``get_async``) that the class lacks, running the async one. Every twin has its source's
    signature: one implementation of every operation. The twins of an ``*_async`` method run
    on the instance's :class:`PrivateLoop` if it has one (attribute ``sync_loop``), otherwise
    as :func:`run_sync` does. A role (:mod:`leveled_ray.roles`) declares both forms for type
    checkers; a declaration the twins now answer stops counting as missing."""
    for name, build in list(vars(cls).items()):
        kind = getattr(build, "two_forms", None)
        if kind is not None:
            for twin_name, twin in ((name, _plan_sync(build)),
                                    (f"{name}_async", _plan_async(build, kind))):
                twin.__qualname__ = f"{cls.__qualname__}.{twin_name}"
                setattr(cls, twin_name, twin)
    for name in [n for n in dir(cls) if n.endswith("_async") and not n.startswith("_")]:
        plain = name.removesuffix("_async")
        # A form written (or inherited) already stays; a role's declaration of it does not.
        if not hasattr(cls, plain) or getattr(getattr(cls, plain), "__isabstractmethod__", False):
            twin = _twin(name, getattr(cls, name))
            twin.__qualname__ = f"{cls.__qualname__}.{plain}"
            setattr(cls, plain, twin)
    abc.update_abstractmethods(cls)
    return cls


def _plan_sync(build):
    def method(self, *args, **kwargs):
        return build(self, *args, **kwargs).run()

    method.__name__, method.__doc__ = build.__name__, build.__doc__
    method.__signature__ = inspect.signature(build)
    return method


def _plan_async(build, kind: str):
    if kind == "iterator":
        def method(self, *args, **kwargs):
            return build(self, *args, **kwargs).run_async()
        method.__doc__ = f"Async iterator form of :meth:`{build.__name__}`."
    else:
        async def method(self, *args, **kwargs):
            return await build(self, *args, **kwargs).run_async()
        method.__doc__ = f"Awaitable :meth:`{build.__name__}`."
    method.__name__ = f"{build.__name__}_async"
    method.__signature__ = inspect.signature(build)
    return method


def sync_twin(async_function):
    """The synchronous twin of a module's ``*_async`` function, with its signature: assign it
    as ``name = sync_twin(name_async)``."""
    def function(*args, **kwargs):
        return run_sync(async_function(*args, **kwargs))

    _describe(function, async_function, ":func:")
    function.__qualname__ = function.__name__
    function.__module__ = async_function.__module__
    return function


def _twin(name: str, async_form):
    def method(self, *args, **kwargs):
        coro = getattr(self, name)(*args, **kwargs)
        private = getattr(self, "sync_loop", None)
        return run_sync(coro) if private is None else private.run(coro)

    _describe(method, async_form, ":meth:")
    return method


def _describe(twin, async_form, role: str) -> None:
    twin.__name__ = async_form.__name__.removesuffix("_async")
    twin.__doc__ = f"Synchronous {role}`{async_form.__name__}`."
    twin.__signature__ = inspect.signature(async_form)


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
            if interrupted or task.done():  # a second Ctrl-C does not wait; nor, if code
                raise KeyboardInterrupt()  # that saved this handler put it back late, one
            interrupted = True  # after the call: it acts as Python's default then
            self._loop.call_soon_threadsafe(task.cancel)
        on_sigint.leveled_step = True

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
    current = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or current is not signal.default_int_handler
            and not getattr(current, "leveled_step", False)):  # a finished call's: ours
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
