"""Failover: a Bookie that Ray restarts opens its store again by itself.

A Bookie actor is created with ``max_restarts`` (``Options.max_restarts``). When its process
or its node dies, Ray restarts it, on a surviving node if need be (a sharded store's
placement group moves the shard's bundle there), and a restart runs the constructor again.
:func:`restartable` makes that constructor start the store as an open does: claim the store
with the next writer epoch, replay the Journal's tail and settle prepared parts. Every call
that reaches the restarted actor waits for that first, so clients keep their handles and
their later calls simply succeed. A call in flight when the process died gets
``StoreUnavailableError`` (its outcome is unknown); reads are sent again by the client.

The restarted writer claims the store only if no one else opened it while it was down
(:func:`~leveled_ray.manifest.transitions.reclaim_epoch`): the epoch it held is kept in Ray's
key-value store, which outlives the process. If someone did, it stands down, fenced, and
every call raises ``FencedError``.

The shell knows its actor only through a :class:`RayActor` (its id, whether it was restarted,
Ray's key-value store, its own end): the simulation runs this module unchanged with one of its
own.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.abc
import inspect
import logging
import os
import pickle
import sys
import warnings

from ..errors import FencedError, StoreClosedError, StoreUnavailableError

#: Methods a restarted Bookie answers before it has reopened its store: they read only what
#: the constructor set, or wait for the reopen themselves.
UNGATED = frozenset({"get_options", "get_clock", "start", "close", "assign"})


class RayActor:
    """What a Bookie's shell knows of its own actor, from Ray: its id, whether Ray restarted
    it, and Ray's key-value store, which outlives its process. The shell reads it only through
    these methods: the deterministic simulation (``testing/sim``) gives it one of its own."""

    def begin(self) -> None:
        """The actor's process begins to serve it: pandas is kept out (see
        :func:`without_pandas`)."""
        without_pandas()

    def actor_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_actor_id()

    def restarted(self) -> bool:
        """Whether Ray restarted this actor. (Ray's own property reads a deprecated one of its
        own, and every Bookie's start logged Ray's warning about it.)"""
        import ray

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)

    def die(self) -> None:
        """End this process now, so that Ray restarts the actor (not ``exit_actor``: that
        would be final)."""
        os._exit(1)

    def get(self, key: bytes) -> bytes | None:
        from ray.experimental import internal_kv

        return internal_kv._internal_kv_get(key)

    def put(self, key: bytes, value: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(key, value, overwrite=True)

    def delete(self, key: bytes) -> None:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(key)


#: The actor context of every Bookie Ray runs.
RAY_ACTOR = RayActor()


def _epoch_key(actor_id: str) -> bytes:
    return f"leveled/writer_epoch/{actor_id}".encode()


def _assignment_key(actor_id: str) -> bytes:
    return f"leveled/spare_assignment/{actor_id}".encode()


def remember_epoch(actor: RayActor, epoch: int) -> None:
    """Keep this actor's writer epoch where its restart finds it."""
    actor.put(_epoch_key(actor.actor_id()), str(epoch).encode())


def forget_epoch(actor: RayActor) -> None:
    """A closed Bookie is not restarted: drop what a restart would read (its epoch, and a
    spare's assignment)."""
    actor_id = actor.actor_id()
    actor.delete(_epoch_key(actor_id))
    actor.delete(_assignment_key(actor_id))


def keep_assignment(actor: RayActor, kwargs: bytes) -> None:
    """Keep a spare Bookie's pickled constructor arguments where its restart finds them (a
    restart runs the constructor with the spare's own arguments: none)."""
    actor.put(_assignment_key(actor.actor_id()), kwargs)


def assignment(actor: RayActor) -> dict | None:
    """The arguments :func:`keep_assignment` kept for this actor, when Ray restarted it."""
    if not actor.restarted():
        return None
    value = actor.get(_assignment_key(actor.actor_id()))
    return None if value is None else pickle.loads(value)


def lost_epoch(actor: RayActor) -> int | None:
    """The writer epoch this actor held before Ray restarted it (``None``: a first start,
    or an epoch never recorded, as when the process died inside ``start``)."""
    if not actor.restarted():
        return None
    value = actor.get(_epoch_key(actor.actor_id()))
    return None if value is None else int(value)


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses to import pandas (see :func:`without_pandas`)."""

    def find_spec(self, name, path, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is kept out of a Bookie's process", name=name)
        return None


def without_pandas() -> None:
    """In a Bookie's own process: pandas cannot be imported, so pyarrow, which imports it the
    first time it builds an array (to tell pandas objects apart), finds none. That import
    took 0.45 s of every open here, and the store's actors never use pandas. (Where pandas is
    loaded already, nothing changes.)"""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def _forward(name: str, fn):
    """The actor's method ``name``: the Bookie's, once a restarted Bookie has reopened its
    store. An async one waits for that; a sync one, which cannot wait, raises
    ``StoreUnavailableError`` until then."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def forward(self, *args, **kwargs):
            await self.reopened()
            return await getattr(self.bookie, name)(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def forward(self, *args, **kwargs):
            self.check_reopened()
            return getattr(self.bookie, name)(*args, **kwargs)
    return forward


def restartable(cls, actor: RayActor = RAY_ACTOR):
    """The Ray actor class of the Bookie class ``cls``: a shell holding one Bookie, whose
    constructor, on a restart, starts reopening the store, and whose every public method but
    :data:`UNGATED` forwards to the Bookie once the reopen is done. (A shell, not a subclass:
    the Bookie's calls to its own methods are not gated.)

    A reopen refused by fencing leaves the actor fenced (each call raises the refusal); any
    other failure (the object store unreachable through its retries) ends the process, so
    that Ray restarts it and the reopen begins again from nothing. ``actor``: what the shell
    knows of its actor (Ray's, but in the simulation)."""

    class Restartable:
        def __init__(self, *args, **kwargs):
            """A Bookie of ``cls(*args, **kwargs)``; without arguments, a spare, which gets
            its Bookie from :meth:`assign` (or, restarted, from where ``assign`` kept it)."""
            actor.begin()
            # Calls wait for the first start too: a named actor is found as soon as it is
            # created, before its store is open (a handle following a move finds it so).
            self._started = asyncio.Event()
            self._reopen: asyncio.Future | None = None
            self._stood_down: FencedError | None = None
            self._ended: StoreClosedError | None = None
            self.bookie = None
            if not args and not kwargs:
                kept = assignment(actor)
                if kept is None:  # a spare, still waiting for its store...
                    self._end_if_restarted()  # ...unless it had one and closed it
                    return
                args, kwargs = (), kept
            self._make(args, kwargs)
            if self._reopen is None:
                self._end_if_restarted()

        def _make(self, args, kwargs) -> None:
            self.bookie = cls(*args, **kwargs)
            self.bookie.lost_epoch = lost_epoch(actor)
            if self.bookie.lost_epoch is not None:  # the constructor runs in the actor's loop
                self._reopen = asyncio.ensure_future(self._start_again())

        def _end_if_restarted(self) -> None:
            """Restarted with no epoch to reclaim the store with: its Bookie was closed before
            its process died (a mover killed between the close and the actor's end), or died
            inside its first start. Calls are answered so, not held for a start that no one
            will call (an ``assign`` or ``start`` makes it a Bookie again)."""
            if actor.restarted():
                self._ended = StoreClosedError("this Bookie was closed, or died before it "
                                               "opened; its restart does not open the store")

        def assign(self, kwargs: bytes) -> None:
            """A spare becomes the Bookie ``cls(**pickle.loads(kwargs))``; ``kwargs`` are kept
            in Ray's key-value store, for a restart."""
            if self.bookie is not None:
                raise RuntimeError("this Bookie already has its store")
            keep_assignment(actor, kwargs)
            self._ended = None
            self._make((), pickle.loads(kwargs))

        async def start(self) -> dict:
            self._ended = None
            info = await self.bookie.start()
            remember_epoch(actor, self.bookie.epoch)
            self._started.set()
            return info

        async def _start_again(self) -> None:
            try:
                await self.start()
            except FencedError as exc:
                self._stood_down = exc
                self.bookie.writes.stopped(exc)  # close then flushes nothing
                self._started.set()  # calls are answered: with the refusal
            except Exception:
                logging.getLogger(__name__).exception("reopening after a restart failed")
                actor.die()

        async def reopened(self) -> None:
            if self._ended is not None:
                raise self._ended
            if self._reopen is not None:
                await asyncio.shield(self._reopen)
            else:
                await self._started.wait()
            self.check_reopened()

        def check_reopened(self) -> None:
            if self._ended is not None:
                raise self._ended
            if self._reopen is not None and not self._reopen.done():
                raise StoreUnavailableError("the store's Bookie is reopening after a restart")
            if self._reopen is None and not self._started.is_set():
                raise StoreUnavailableError("the store's Bookie is opening")
            self._reopen = None
            if self._stood_down is not None:
                raise self._stood_down.again()

        async def close(self) -> None:
            if self._reopen is not None:  # whatever its outcome: a stood-down actor closes too
                await asyncio.gather(asyncio.shield(self._reopen), return_exceptions=True)
            if self.bookie is not None and self._ended is None:  # else it holds nothing
                await self.bookie.close()
            forget_epoch(actor)

        def get_options(self):
            return self.bookie.get_options()

        def get_clock(self):
            return self.bookie.get_clock()

    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_") and name not in UNGATED:
            setattr(Restartable, name, _forward(name, fn))
    Restartable.__name__ = Restartable.__qualname__ = cls.__name__
    return Restartable
