"""Calling actors: unwrap Ray's exceptions into leveled-ray's, and run actor logic without Ray.

Actor logic is written against Ray's handle interface (``await handle.method.remote(...)``).
:class:`LocalHandle` gives a plain object that interface, so tests drive the same code in one
process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pickle
import time
from collections.abc import Iterator
from typing import Any

from ..errors import LeveledError, StoreClosedError, StoreUnavailableError

NAMESPACE = "leveled"


def process_stats() -> dict:
    """This process's id, its Ray node (``None`` outside Ray), its CPU seconds so far, and
    memory: resident, and private (resident less the file-backed pages, such as shared
    libraries, that other processes share)."""
    import os

    out = {"pid": os.getpid(), "node": _node_id(), "cpu_s": round(time.process_time(), 3)}
    try:
        with open("/proc/self/statm") as f:
            _, resident, shared = (int(x) for x in f.read().split()[:3])
        page = os.sysconf("SC_PAGE_SIZE")
        return {**out, "rss_bytes": resident * page, "private_bytes": (resident - shared) * page}
    except OSError:  # not Linux: the peak is what the platform offers
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {**out, "rss_bytes": peak, "private_bytes": peak}


def _node_id() -> str | None:
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def unwrap(exc: BaseException) -> BaseException:
    """The leveled-ray error behind a Ray exception (or the exception itself)."""
    try:
        from ray import exceptions as rex
    except ImportError:  # pragma: no cover - ray is a dependency
        return exc
    seen = 0
    while isinstance(exc, rex.RayTaskError) and seen < 8:
        cause = getattr(exc, "cause", None)
        if cause is None:
            break
        exc, seen = cause, seen + 1
    if isinstance(exc, LeveledError):
        return exc
    if isinstance(exc, rex.ActorUnavailableError):  # in flight as it died; it restarts
        return StoreUnavailableError(f"the store's Bookie was lost during the call, and "
                                     f"restarts: {exc}")
    if isinstance(exc, rex.RayActorError):
        return StoreClosedError(f"the store's actors are gone: {exc}")
    return exc


def as_actor(cls, max_concurrency: int):
    """``cls`` as a Ray actor class. Actors take no CPU slot: they mostly wait on I/O, and a
    small cluster must still have room for the tasks that use the store."""
    import ray

    return ray.remote(num_cpus=0, max_concurrency=max_concurrency)(cls)


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds (a long poll's wait).

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives as the
    event is set, and a background loop cancelled at close would then poll once more.
    ``asyncio.wait`` always passes the cancellation on."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()  # a no-op once it is done
    return bool(done)


async def call(method, *args, **kwargs) -> Any:
    """``await method.remote(*args)``, raising leveled-ray errors rather than Ray's."""
    try:
        return await method.remote(*args, **kwargs)
    except Exception as exc:
        raise unwrap(exc) from None


#: How long a read whose Bookie was lost during the call is sent again, in waits between
#: sends (failover): Ray fails the calls made while the Bookie restarts ("the actor is
#: restarting"), and a restart takes seconds, longer under load. The waits grow from the
#: first to the most.
READ_RESEND_S = 60.0
FIRST_RESEND_WAIT_S = 0.05
#: A read resent to a restarting Bookie is answered at most this late after its reopen (a
#: failed send costs the caller one round trip; at 1 s, a failover's first read came up to a
#: second after the shard served again).
MOST_RESEND_WAIT_S = 0.25


def resend_waits() -> Iterator[float]:
    """The waits before each send again of a read: they add up to :data:`READ_RESEND_S`."""
    wait, total = FIRST_RESEND_WAIT_S, 0.0
    while total + wait <= READ_RESEND_S:
        yield wait
        total += wait
        wait = min(2 * wait, MOST_RESEND_WAIT_S)


async def call_read(method, *args) -> Any:
    """:func:`call` of a method that changes nothing: sent again (see :func:`resent`) if the
    Bookie is lost during it."""
    try:
        return await call(method, *args)
    except StoreUnavailableError as exc:
        return await resent(lambda: call(method, *args), exc)


def _answer(done) -> tuple[bool, Any]:
    """``(True, result)`` of the first of the ``done`` sends of a read that was answered,
    else ``(False, None)``; an error other than the Bookie's loss is raised."""
    for send in done:
        exc = send.exception()
        if exc is None:
            return True, send.result()
        exc = unwrap(exc)
        if not isinstance(exc, StoreUnavailableError):
            raise exc
    return False, None


async def resent(send, lost: StoreUnavailableError) -> Any:
    """The answer of a read whose Bookie was lost (``lost``), sent again by ``send()`` (an
    awaitable) after each of :func:`resend_waits`, without waiting for the sends before it
    to fail; ``lost`` is raised once the waits run out.

    Ray holds a call sent to a restarting actor 1-2 s before it fails it (it waits to learn
    whether the actor died): a resend made only once the send before it had failed was
    answered up to 2 s after the reopen, and one made after each wait is answered within a
    wait of it."""
    pending: set = set()
    try:
        for wait in resend_waits():
            pending.add(asyncio.ensure_future(send()))
            end = time.monotonic() + wait
            while (left := end - time.monotonic()) > 0:
                if not pending:
                    await asyncio.sleep(left)
                    break
                done, pending = await asyncio.wait(pending, timeout=left,
                                                   return_when=asyncio.FIRST_COMPLETED)
                answered, result = _answer(done)
                if answered:
                    return result
        raise lost
    finally:
        for waiting in pending:  # sends Ray still holds: their answers are not needed
            waiting.cancel()


def pack(records: list) -> bytes:
    """Lists of many small records cross an actor boundary as one pickled blob.

    Ray's own serializer calls back into Python for every object (about 10 us each); the C
    pickler does a list of a thousand tuples in well under a millisecond. Only plain data goes
    in here: ObjectRefs must stay outside, where Ray tracks them.
    """
    return pickle.dumps(records, protocol=5)


def unpack(blob: bytes) -> list:
    return pickle.loads(blob)


#: Groups with more value bytes than this send their values through Ray's object store.
INLINE_VALUE_BYTES = 64 * 1024


class ValueBatch:
    """The values of one ``put_many`` on their way from the client to the Inker.

    Small batches travel inline. Large ones are put in Ray's object store as one Arrow array,
    and only a reference crosses the actor boundary: the Inker (in the Bookie's process) reads
    them from there once, when it writes them. ``None`` stands for a delete.
    """

    __slots__ = ("inline", "ref", "resolved")

    def __init__(self, inline: list | None = None, ref: list | None = None):
        self.inline = inline
        self.ref = ref  # [ObjectRef]: a list, so Ray passes the reference on unresolved
        self.resolved: list | None = inline  # the values, once read here

    def __reduce__(self):
        return (ValueBatch, (self.inline, self.ref))

    @classmethod
    def pack(cls, values: list, nbytes: int) -> ValueBatch:
        if nbytes < INLINE_VALUE_BYTES:
            return cls(inline=values)
        import pyarrow as pa
        import ray

        return cls(ref=[ray.put(pa.array(values, type=pa.binary()))])

    async def resolve(self) -> list:
        if self.resolved is None:
            self.resolved = (await self.ref[0]).to_pylist()
        return self.resolved


class _LocalMethod:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        result = self._fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(result)
        return fut


class LocalHandle:
    """Gives a plain object the interface of a Ray actor handle, within one event loop."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _LocalMethod(getattr(self._obj, name))

    @property
    def local(self):
        return self._obj


def spawn(cls, role: str, local: bool, owner_name: str | None, *args):
    """``cls(*args)`` as a Ray actor created by the calling actor on its own node (named
    ``<owner_name>.<role>`` when the owner has a name), or as a plain object in a
    :class:`LocalHandle` when running without Ray."""
    if local:
        return LocalHandle(cls(*args))
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    name = f"{owner_name}.{role}" if owner_name else None
    # On the owner's node: a store's actors run together (a shard's stay on its node).
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return as_actor(cls, max_concurrency=64).options(namespace=NAMESPACE, name=name,
                                                      scheduling_strategy=here).remote(*args)


def made(handle, local: bool) -> concurrent.futures.Future:
    """A future done once the actor ``handle`` has been made (its constructor run): until
    then a call to it waits for its process to start, seconds on a loaded node."""
    if local:
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(None)
        return done
    return handle.__ray_ready__.remote().future()


def own_client(store, local: bool):
    """``store`` as an actor of its own would get it, for a part hosted in the calling actor:
    a copy with its own client and request counters (the same object without Ray, as
    :func:`spawn` gives)."""
    return store if local else pickle.loads(pickle.dumps(store))


def self_handle(obj, local: bool):
    """A handle on the calling actor (``obj`` itself, without Ray)."""
    if local:
        return LocalHandle(obj)
    import ray

    return ray.get_runtime_context().current_actor
