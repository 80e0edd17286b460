"""One simulated world: a sharded store's Bookies, each in a process of its own, on the
simulated object store, and the client handles that reach them as Ray's would.

Calls between processes go through :class:`SimHandle`: the callee runs each call as a task of
its own process; arguments and answers are pickled (as Ray does, so no two processes share an
object); a call to a dead process, or one in flight when it dies, fails with
``StoreClosedError`` (Ray's ``ActorDiedError``, as the client sees it). After a kill, the
shard's next :meth:`World.start_shard` is a new Bookie over the same store, as a reopen (or a
restarted actor) is, and handles reach it from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import pickle
import random
import warnings
from dataclasses import dataclass

from leveled_ray.actors.bookie import Bookie
from leveled_ray.bulk import read as bulk_read
from leveled_ray.bulk import write as bulk_write
from leveled_ray.client.store import Store
from leveled_ray.clock import system_clock
from leveled_ray.cluster import redirect, txn
from leveled_ray.cluster.backup import find_shard_map
from leveled_ray.cluster.layout import shard_name
from leveled_ray.cluster.redirect import Layout
from leveled_ray.cluster.split import split_shard
from leveled_ray.cluster.store import ShardedStore
from leveled_ray.errors import (
    InvalidArgumentError,
    LeveledError,
    StoreClosedError,
    WrongShardError,
)
from leveled_ray.files import clerk
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.shard_map import ShardMap, create_shard_map
from leveled_ray.options import Options

from .loop import SimLoop, deterministic, run_in
from .objects import SimObjects

#: The name the world's store runs under (its shards' Bookies are ``sim.shard-000``, ...).
NAME = "sim"


@dataclass
class Incarnation:
    """One Bookie process of a shard."""

    pid: str
    bookie: Bookie


class World:
    """See the module docstring. Use it as a context manager around :meth:`run`."""

    def __init__(self, seed: int, options: Options, shards: int | None = 2):
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop = SimLoop(random.Random(seed * 7919 + 1))
        self.objects = SimObjects(random.Random(seed * 104729 + 3), self.loop)
        self.options = options
        self.sharded = shards is not None  # else one plain store, at the root
        self.shard_count = shards or 1
        self.url = f"memory://sim-{seed}"
        self.shard_map: ShardMap | None = None
        #: Each shard's running Bookie, by prefix (``""``: a plain store), as Ray finds
        #: named actors: a prefix names one shard for good, whatever its index.
        self.live: dict[str, Incarnation | None] = {}
        self.busy: set[str] = set()  # shards a client is closing, restarting or splitting
        self.in_flight: dict[str, set[asyncio.Future]] = {}
        self._numbers = itertools.count()
        self.trace: list[str] = []
        self._patches = contextlib.ExitStack()

    # -- time and processes --

    #: Every process's clock: wall time, which is the loop's virtual time within the run
    #: (:func:`~.loop.deterministic`); a module function, so it pickles as Ray would send it.
    clock = staticmethod(system_clock)

    def note(self, event: str) -> None:
        """Add to the run's trace (two runs of a seed leave the same trace)."""
        self.trace.append(f"{self.loop.now:.6f} {event}")

    def pid(self, role: str) -> str:
        return f"{role}#{next(self._numbers)}"

    def spawn(self, role: str, coro) -> tuple[str, asyncio.Task]:
        """``coro`` as the first task of a new process named for ``role``: its pid and task."""
        pid = self.pid(role)
        return pid, run_in(pid, coro)

    def kill(self, pid: str, error: type[StoreClosedError] = StoreClosedError) -> None:
        """``kill -9`` of process ``pid``: none of its steps runs again, and the calls in
        flight to it fail with ``error`` (``StoreUnavailableError`` for an actor that Ray
        restarts, as the client sees it then)."""
        self.note(f"kill {pid}")
        self._end(pid, error)
        for key, inc in self.live.items():
            if inc is not None and inc.pid == pid:
                self.live[key] = None

    # -- the store --

    def key(self, shard: int) -> str:
        """Shard ``shard``'s key in :attr:`live`: its prefix in the current layout."""
        return self.shard_map.prefixes[shard] if self.sharded else ""

    def running(self, shard: int) -> Incarnation | None:
        return self.live.get(self.key(shard))

    def shard_url(self, shard: int) -> str:
        return self.shard_map.shard_url(self.url, shard) if self.sharded else self.url

    def name(self, shard: int) -> str:
        return self._name_of(self.key(shard))

    def _name_of(self, key: str) -> str:
        return shard_name(NAME, key) if self.sharded else NAME

    async def create(self) -> None:
        if self.sharded:
            self.shard_map = await create_shard_map(
                ObjectStore.from_url(self.url, self.options), ShardMap.new(self.shard_count))
        for shard in range(self.shard_count):
            await self.start_shard(shard)

    async def start_shard(self, shard: int, lost_epoch: int | None = None) -> None:
        """Open shard ``shard`` in a new Bookie process (fencing any earlier one); with
        ``lost_epoch``, as Ray's restart of a Bookie that held that epoch (failover: it
        claims the store only if no one opened it since)."""
        await self._start(self.key(shard), self._made(shard), lost_epoch)

    def _made(self, shard: int) -> Incarnation:
        """A new Bookie process for shard ``shard``, its store not yet opened (its
        constructor reads and writes nothing)."""
        label = self.shard_map.labels[shard] if self.sharded else None
        return Incarnation(self.pid(f"shard{shard}"), Bookie(
            self.shard_url(shard), self.options, self.name(shard), local=True,
            clock=self.clock, shard=(NAME, label) if self.sharded else None))

    async def _start(self, key: str, made: Incarnation, lost_epoch: int | None = None) -> None:
        """Open the shard at ``key`` (its prefix) in ``made``."""
        made.bookie.lost_epoch = lost_epoch
        self.note(f"start {made.pid}" if lost_epoch is None
                  else f"restart {made.pid} after {lost_epoch}")
        await run_in(made.pid, made.bookie.start())
        self.live[key] = made

    def client(self, shard: int) -> Store:
        return self._client(self.key(shard), self.shard_url(shard))

    def _client(self, key: str, url: str) -> Store:
        return Store(SimHandle(self, key), self.options, url, self._name_of(key),
                     {"head_only": None}, self.clock)

    def store(self) -> ShardedStore | Store:
        """A client's handle on the store, with the layout as it is now."""
        if not self.sharded:
            return self.client(0)
        return ShardedStore([self.client(s) for s in range(self.shard_count)], self.shard_map,
                            self.url, NAME, self.options, self.clock)

    async def close_shard(self, shard: int) -> None:
        """A clean close of shard ``shard``'s Bookie; its process ends with it."""
        key = self.key(shard)
        inc = self.live[key]
        self.note(f"close {inc.pid}")
        self.live[key] = None  # new calls find it gone, as after a close
        await run_in(inc.pid, inc.bookie.close())
        self._end(inc.pid, StoreClosedError)  # its loops are stopped; nothing of it runs on

    async def split(self, shard: int, kill_after_s: float | None) -> str:
        """Split shard ``shard`` as a running store's handle does (``cluster/reshape.py``):
        close its Bookie, run the split (``cluster/split.py``) in a process of its own, killed
        after ``kill_after_s`` virtual seconds if given, then start the children if the split
        retired the shard, or the shard again if not (and the children if that open finds the
        shard retired: the split's commit landed late). Returns how it ended."""
        await self.close_shard(shard)
        pid = self.pid("splitter")
        self.note(f"split shard {shard} in {pid}")
        task = run_in(pid, split_shard(self.url, shard, self.options))
        if kill_after_s is not None:
            self.loop.call_later(kill_after_s, lambda: task.done() or self.kill(pid))
        while not task.done() and pid not in self.loop.dead:
            await asyncio.sleep(0.05)
        outcome = ("killed" if not task.done() else "failed" if task.cancelled()
                   or task.exception() is not None else "done")
        root = ObjectStore.from_url(self.url, self.options)
        found = await find_shard_map(root, self.options)
        if found.count == self.shard_map.count:  # not split, it seems
            try:
                await self.start_shard(shard)
                return f"{outcome}, not split"
            except WrongShardError:  # the split's commit, in flight, landed after that read
                found = await find_shard_map(root, self.options)
                outcome += " late"
        self.shard_map, self.shard_count = found, found.count
        for child in (shard, shard + 1):
            await self.start_shard(child)
        return f"{outcome}, split"

    async def move(self, shard: int, kill_after_s: float | None) -> str:
        """Move shard ``shard`` as a running store's handle does (``cluster/reshape.py``): a
        new Bookie process made first, then the shard's closed and the new one opened, all
        driven by a mover's process; killed after ``kill_after_s`` virtual seconds if given,
        and the new Bookie with it (the driver owns it). The old Bookie's close goes on in
        its own process, which nothing ends then (as a detached store's Bookie). Returns how
        it ended: ``"done"``, or, when not, whether the shard was left ``"closed"`` (its user
        opens it again)."""
        # By its prefix: a split of another shard meanwhile shifts the shards' numbers.
        key, made, mover = self.key(shard), self._made(shard), self.pid("mover")
        self.note(f"move shard {shard} to {made.pid} in {mover}")

        async def move() -> None:
            await self.close_shard(shard)
            await self._start(key, made)

        task = run_in(mover, move())
        if kill_after_s is not None:
            self.loop.call_later(kill_after_s, lambda: task.done() or self.kill(mover))
        while not task.done() and mover not in self.loop.dead:
            await asyncio.sleep(0.05)
        if task.done() and not task.cancelled() and task.exception() is None:
            return "done"
        if made.pid not in self.loop.dead:
            self.kill(made.pid)  # Ray ends the actors of a driver that died, or stops them
        outcome = "killed" if mover in self.loop.dead else "failed"
        return f"{outcome}, {'closed' if self.live.get(key) is None else 'not moved'}"

    def _end(self, pid: str, error: type[StoreClosedError]) -> None:
        """Process ``pid`` ends: none of its steps runs again, and the calls still in flight
        to it fail with ``error``, as Ray fails calls to an actor that is gone."""
        self.loop.dead.add(pid)
        for future in self.in_flight.pop(pid, set()):
            if not future.done():
                future.set_exception(error(f"the process {pid} ended"))

    async def close_all(self) -> None:
        for shard in range(self.shard_count):
            if self.running(shard) is not None:
                await self.close_shard(shard)

    # -- running --

    def __enter__(self) -> World:
        # What a process keeps for the stores it read (file clerks and their cache, readers
        # of a Spark read) is keyed by URL: a world's store, at the same URL as the last
        # run's, starts in new processes, with nothing of them.
        clerk._SHARED.clear()
        bulk_read._VIEWS.clear()
        bulk_read._LEASES.clear()
        # Python's cyclic GC runs when allocations cross a threshold, which depends on every
        # earlier run in the process; what it finalizes (async generators) schedules steps.
        # Off for the run, a seed runs the same alone or after others. What was alive before
        # the run is frozen, so the collection after it passes over the run's objects only
        # (a full one costs about a second in a process as large as a test session's).
        gc.disable()
        gc.freeze()
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(lambda loop, context: None)  # dead tasks' leftovers
        self._patches.enter_context(deterministic(self.loop, self.seed))
        objects = self.objects
        self._patches.enter_context(_patched(ObjectStore, "_make_backend",
                                             lambda store: objects.backend(store.location)))
        self._patches.enter_context(_patched(bulk_write, "connect_running",
                                             self._running_store))
        # A cross-shard put_many deletes its commit record off the caller's path, in a
        # thread of its own: here, in a task of the caller's process (no thread may race
        # the simulation).
        self._patches.enter_context(_patched(txn, "_RECORD_DELETES", _RecordDeletes()))
        self._patches.enter_context(_patched(redirect, "running_bookies", self._bookies))
        return self

    def __exit__(self, *exc) -> None:
        # The tasks still pending (killed processes', and loops that run until a close) end
        # here, while the loop is open: a coroutine collected later would run its cleanup
        # against a closed loop.
        asyncio.events._set_running_loop(self.loop)
        for task in asyncio.all_tasks(self.loop):
            with contextlib.suppress(BaseException):
                task.get_coro().close()
        asyncio.events._set_running_loop(None)
        self._patches.close()
        asyncio.set_event_loop(None)
        self.loop._ready.clear()
        self.loop._scheduled.clear()
        self.loop.close()
        with warnings.catch_warnings():
            # The steps an ended process never began (dropped with its queue) are coroutines
            # that never ran: expected, as for any process killed.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            gc.collect()  # the run's garbage, while its finalizers can still do no harm
        gc.unfreeze()
        gc.enable()

    def run(self, coro, limit_s: float):
        """Run ``coro`` on the world's loop for at most ``limit_s`` virtual seconds."""
        return self.loop.run_until_complete(asyncio.wait_for(coro, limit_s))

    async def _running_store(self, store_name: str, ray_address=None):
        """:func:`leveled_ray.bulk.write.connect_running`, as named actors are found here."""
        for key in self.live:
            if self._name_of(key) == store_name:
                url = f"{self.url}/{key}" if self.sharded else self.url
                return self._client(key, url)
        raise InvalidArgumentError(f"no running store named {store_name!r}")

    async def _bookies(self, name: str, shard_map: ShardMap, current: Layout) -> Layout | None:
        """:func:`leveled_ray.cluster.redirect.running_bookies`, as named actors are found
        here: a handle reaches a prefix's Bookie whichever process runs it."""
        if any(self.live.get(prefix) is None for prefix in shard_map.prefixes):
            return None
        if shard_map.same_layout(current.shard_map):
            return None  # the same handles: each reaches its prefix's Bookie already
        return Layout(tuple(self._client(p, shard_map.shard_url(self.url, s))
                            for s, p in enumerate(shard_map.prefixes)), shard_map)


class SimHandle:
    """A handle on the Bookie of the shard at ``key``, whichever process runs it now."""

    def __init__(self, world: World, key: str):
        self._world, self._shard = world, key

    def __getattr__(self, name: str):
        return _SimMethod(self._world, self._shard, name)


class _SimMethod:
    def __init__(self, world: World, shard: str, name: str):
        self.world, self.shard, self.name = world, shard, name

    def remote(self, *args, **kwargs) -> asyncio.Future:
        world = self.world
        future = asyncio.get_running_loop().create_future()
        inc = world.live.get(self.shard)
        if inc is None:
            future.set_exception(StoreClosedError(f"shard {self.shard}'s Bookie is gone"))
            return future
        args, kwargs = _copy((args, kwargs))
        world.in_flight.setdefault(inc.pid, set()).add(future)

        async def run():
            result = getattr(inc.bookie, self.name)(*args, **kwargs)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        def answered(task: asyncio.Task) -> None:
            world.in_flight.get(inc.pid, set()).discard(future)
            if future.done():
                return
            if task.cancelled():
                future.set_exception(StoreClosedError("the call was cancelled"))
            elif task.exception() is not None:
                future.set_exception(task.exception())
            else:
                try:
                    future.set_result(_copy(task.result()))
                except UnpicklableError as exc:  # the caller sees it: an untyped error
                    future.set_exception(exc)

        run_in(inc.pid, run()).add_done_callback(answered)
        return future


class _RecordDeletes:
    """Stands in for ``cluster.txn._RECORD_DELETES``: ``submit(_delete_quietly, root, name)``
    deletes the record in a task."""

    def submit(self, _fn, root: ObjectStore, name: str) -> None:
        async def delete() -> None:
            with contextlib.suppress(LeveledError):
                await root.delete_async(name)

        asyncio.get_running_loop().create_task(delete())


class UnpicklableError(TypeError):
    """An argument or answer between processes that Ray could not send: the run fails (as
    an untyped error)."""


def _copy(value):
    """``value`` as another process receives it: pickled, as Ray sends it."""
    try:
        return pickle.loads(pickle.dumps(value, protocol=5))
    except Exception as exc:
        raise UnpicklableError(f"{type(value).__name__} cannot be sent between processes: "
                               f"{exc}") from exc


@contextlib.contextmanager
def _patched(owner, name: str, value):
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)
