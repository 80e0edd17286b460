"""One simulated world: a sharded store's Bookies, each in a process of its own, on the
simulated object store, and the client handles that reach them as Ray's would.

The world stands in for Ray, behind the seams the product declares, so that the product's own
code runs unchanged:

* :class:`SimRuntime` is ``cluster/runtime.py``'s :class:`~leveled_ray.cluster.runtime.Runtime`:
  a split or move (``cluster/reshape.py``) and a handle following a new layout
  (``cluster/redirect.py``) make, open, stop and close Bookies, and find them by name, here;
* every Bookie runs in the shell Ray runs it in (``actors/failover.py``), told of its actor by
  :class:`SimActorContext`: a restart (:meth:`World.failover`) runs the shell's constructor
  again in a new process, and the shell reopens the store by itself;
* named actors (:class:`SimActor`) as Ray keeps them: a name held from creation to the actor's
  end, Ray's key-value store, calls held while an actor restarts, and the end of the actors a
  driver made when it dies.

Calls between processes go through :class:`SimHandle`: the callee runs each call as a task of
its own process; arguments and answers are pickled (as Ray does, so no two processes share an
object); a call to a dead process, or one in flight when it dies, fails with
``StoreClosedError`` (Ray's ``ActorDiedError``, as the client sees it), or
``StoreUnavailableError`` when Ray restarts the actor. A call between live processes meets
the object store's fault rate too, as Ray's ``ActorUnavailableError`` (a network fault): never
delivered, or run with its answer lost; the caller cannot tell which. A user's reopen
(:meth:`World.start_shard`) is a new process of the shard's actor, which handles reach from
then on.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import itertools
import logging
import pickle
import random
import sys
import warnings
from dataclasses import dataclass

from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.failover import restartable
from leveled_ray.bulk import read as bulk_read
from leveled_ray.bulk import write as bulk_write
from leveled_ray.client import store as client_store
from leveled_ray.client.store import Store
from leveled_ray.clock import system_clock
from leveled_ray.cluster import txn
from leveled_ray.cluster.layout import shard_name
from leveled_ray.cluster.redirect import Layout
from leveled_ray.cluster.split import settle_splits
from leveled_ray.cluster.store import ShardedStore
from leveled_ray.errors import (
    FencedError,
    InvalidArgumentError,
    LeveledError,
    StoreClosedError,
    StoreUnavailableError,
)
from leveled_ray.files import clerk
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.shard_map import ShardMap, create_shard_map
from leveled_ray.options import Options

from .loop import PROCESS, SimLoop, deterministic, run_in
from .objects import SimObjects

#: The name the world's store runs under (its shards' Bookies are ``sim.shard-000``, ...).
NAME = "sim"


@dataclass
class Incarnation:
    """One Bookie process of a shard: the actor's shell (``actors/failover.py``) and the
    Bookie in it."""

    pid: str
    shell: object

    @property
    def bookie(self) -> Bookie:
        return self.shell.bookie


@dataclass
class SimActor:
    """One named Bookie actor, as Ray keeps it: its process now (``None`` while it is down;
    ``restarting``: Ray restarts it, and holds the calls to it meanwhile), opened again in
    place by :meth:`World.start_shard`; ``owner``: the process that made it (a driver), whose
    death ends it for good (Ray's ownership, for an actor not detached)."""

    id: str
    name: str
    key: str  # its shard's prefix
    restarting: bool = False
    inc: Incarnation | None = None
    owner: str | None = None
    ended: bool = False
    pending: Incarnation | None = None  # its first process, made, not yet opened


class World:
    """See the module docstring. Use it as a context manager around :meth:`run`."""

    def __init__(self, seed: int, options: Options, shards: int | None = 2,
                 skew_s: float = 0.0):
        self.seed = seed
        self.skew_s = skew_s  # how far each process's wall clock may be off
        self.rng = random.Random(seed)
        self.loop = SimLoop(random.Random(seed * 7919 + 1))
        self.objects = SimObjects(random.Random(seed * 104729 + 3), self.loop)
        self._call_faults = random.Random(seed * 1299709 + 5)
        self.options = options
        self.sharded = shards is not None  # else one plain store, at the root
        self.shard_count = shards or 1
        self.url = f"memory://sim-{seed}"
        self.shard_map: ShardMap | None = None
        #: Ray's named actors (a shard's Bookie, under its shard's name or one a move gave
        #: it), and what its key-value store maps a shard's name to (see
        #: ``client/actor_names.py``).
        self.actors: dict[str, SimActor] = {}
        self.pointers: dict[str, str] = {}
        self.kv: dict[bytes, bytes] = {}  # the rest of Ray's key-value store
        self.processes: dict[str, tuple[SimActor, bool]] = {}  # pid: (actor, a restart?)
        self.shells = restartable(Bookie, SimActorContext(self))
        self.busy: set[str] = set()  # shards a client is closing, restarting or reshaping
        self.in_flight: dict[str, set[asyncio.Future]] = {}
        #: Every Bookie process made, in order (a run's counters are summed over them).
        self.incarnations: list[Incarnation] = []
        self._numbers = itertools.count()
        self.trace: list[str] = []
        #: Errors of a live process that no caller saw: an exception a task never handed to
        #: anyone (the loop's handler), or one a background loop logged. Only leveled-ray's
        #: typed errors are expected there (see :meth:`untyped_errors`).
        self.unseen: list[BaseException] = []
        self.runtime = SimRuntime(self)
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

    def kill(self, pid: str, restarts: bool = False) -> None:
        """``kill -9`` of process ``pid``: none of its steps runs again. The calls in flight
        to it fail (``StoreUnavailableError`` if Ray restarts its actor, ``restarts``: the
        client sees it so; else ``StoreClosedError``), and the calls sent to its actor until
        :meth:`failover` restarts it are held. The actors it made end with it."""
        self.note(f"kill {pid}")
        self._end(pid, StoreUnavailableError if restarts else StoreClosedError)
        for actor in list(self.actors.values()):
            if actor.inc is not None and actor.inc.pid == pid:
                actor.inc, actor.restarting = None, restarts
            if actor.owner == pid:
                self.end_actor(actor)

    def partition(self, pid: str, lasts_s: float) -> None:
        """Process ``pid`` is cut off from its callers, as by a partition of its node: the
        calls in flight to it fail as unavailable and its actor restarts (Ray gave its node
        up), but the process runs on for ``lasts_s`` virtual seconds (its calls in flight and
        its background work go on, against the object store) before it is killed."""
        self.note(f"partition {pid}")
        for future in self.in_flight.pop(pid, set()):
            if not future.done():
                future.set_exception(StoreUnavailableError(f"the process {pid} is cut off"))
        for actor in self.actors.values():
            if actor.inc is not None and actor.inc.pid == pid:
                actor.inc, actor.restarting = None, True
        self.loop.call_later(lasts_s, lambda: self.kill(pid))

    def call_fault(self) -> str | None:
        """The fault a call between live processes meets, if any: ``refused`` (never
        delivered) or ``lost`` (run, its answer lost), at the object store's fault rate."""
        rate = self.objects.fault_rate
        if rate and self._call_faults.random() < rate:
            fault = self._call_faults.choice(("refused", "lost"))
            self.objects.faults[f"call {fault}"] += 1
            return fault
        return None

    def new_actor(self, name: str, key: str, owner: str | None = None) -> SimActor:
        return SimActor(f"{name}@{next(self._numbers)}", name, key, owner=owner)

    def end_actor(self, actor: SimActor) -> None:
        """Ray's end of an actor (``ray.kill``, or its owner's death): its process ends, and
        its name is free."""
        for inc in (actor.inc, actor.pending):
            if inc is not None:
                self._end(inc.pid, StoreClosedError)
        actor.inc, actor.ended, actor.restarting = None, True, False
        if self.actors.get(actor.name) is actor:
            del self.actors[actor.name]

    # -- the store --

    def key(self, shard: int) -> str:
        """Shard ``shard``'s prefix in the current layout (``""``: a plain store's)."""
        return self.shard_map.prefixes[shard] if self.sharded else ""

    def actor_at(self, key: str) -> SimActor | None:
        """The actor that handles find by the name of the shard at prefix ``key``."""
        name = self._name_of(key)
        return self.actors.get(self.pointers.get(name, name))

    def running_at(self, key: str) -> Incarnation | None:
        """The process that serves the shard at prefix ``key``: not one whose Bookie was
        closed (by a split or move whose driver died before it ended the actor)."""
        actor = self.actor_at(key)
        inc = None if actor is None else actor.inc
        return None if inc is None or inc.bookie.close_begun else inc

    def running(self, shard: int) -> Incarnation | None:
        return self.running_at(self.key(shard))

    def shard_url(self, shard: int) -> str:
        return self.shard_map.shard_url(self.url, shard) if self.sharded else self.url

    def name(self, shard: int) -> str:
        return self._name_of(self.key(shard))

    def _name_of(self, key: str) -> str:
        return shard_name(NAME, key) if self.sharded else NAME

    def key_of(self, url: str) -> str:
        """The prefix of the shard at ``url``."""
        return url[len(self.url) + 1:] if self.sharded else ""

    async def create(self) -> None:
        if self.sharded:
            self.shard_map = await create_shard_map(
                ObjectStore.from_url(self.url, self.options), ShardMap.new(self.shard_count))
        for shard in range(self.shard_count):
            await self.start_shard(self.key(shard))

    def index(self, key: str) -> int:
        """The shard at prefix ``key`` now (a split shifts the numbers of those after it)."""
        return self.shard_map.prefixes.index(key) if self.sharded else 0

    def is_busy(self, key: str) -> bool:
        """Whether a client is changing the shard at prefix ``key``, or the shard it was split
        from (a split's children are its splitter's until it ends)."""
        return any((key + ".").startswith(busy + ".") for busy in self.busy)

    async def start_shard(self, key: str) -> None:
        """Open the shard at prefix ``key`` in a new Bookie process of its actor (fencing any
        earlier one), which handles reach as before: its user's open. A shard whose actor
        ended gets a new one, under its shard's name, as an open makes it."""
        actor = self.actor_at(key)
        if actor is None:
            self.pointers.pop(self._name_of(key), None)
            actor = self.actors[self._name_of(key)] = self.new_actor(self._name_of(key), key)
        for _ in range(600):  # a closing Bookie finishes its close first (its process runs)
            if actor.inc is None or not actor.inc.bookie.close_begun or actor.inc.bookie.closed:
                break
            await asyncio.sleep(0.1)
        made = await self._shard_process(actor)
        self.note(f"start {made.pid}")
        await run_in(made.pid, made.shell.start())
        if actor.inc is not None:  # a closed Bookie's process: its actor restarts
            self._end(actor.inc.pid, StoreClosedError)
        actor.inc, actor.restarting = made, False

    async def open_other(self, url: str, name: str) -> Store:
        """Open a plain store of its own at ``url`` (a replica's target, say), its Bookie in a
        process of its own named ``name``; a handle on it."""
        actor = self.actors[name] = self.new_actor(name, name)
        made = await self.made(actor, url, self.options, None, self.clock, None)
        self.note(f"start {made.pid} at {url}")
        await run_in(made.pid, made.shell.start())
        actor.inc = made
        return self._client(actor, url)

    async def failover(self, key: str) -> str:
        """Ray's restart of the killed actor of the shard at ``key``: a new process, whose shell
        (``actors/failover.py``) reopens the store by itself, claiming it with the epoch it
        held; the calls held meanwhile go on. What came of it: ``"reclaimed"``, ``"stood
        down"`` (fenced by a newer writer, it answers every call so), ``"closed"`` (its
        Bookie was closed before it was killed: the restart holds no store) or
        ``"unanswered"``."""
        actor = self.actor_at(key)
        await self._restart(actor)
        for _ in range(600):
            try:
                await SimHandle(self, actor).stats.remote()
                return "reclaimed"
            except FencedError:
                return "stood down"
            except StoreUnavailableError:  # a call fault, or its process died and restarts
                await asyncio.sleep(0.5)
            except StoreClosedError:
                return "closed"
        return "unanswered"

    async def _restart(self, actor: SimActor) -> None:
        made = await self._shard_process(actor, restarted=True)
        self.note(f"restart {made.pid}")
        actor.inc, actor.restarting = made, False

    async def open_elsewhere(self, key: str) -> None:
        """Another writer opens the shard at ``key`` and closes it (a user's open of the
        store, not under its name, while its actor was down): its writer epoch moves on."""
        made = await self._shard_process(self.new_actor("elsewhere", key))
        self.note(f"open elsewhere {made.pid}")
        try:
            await run_in(made.pid, made.shell.start())
            await run_in(made.pid, made.shell.close())
        finally:
            self._end(made.pid, StoreClosedError)

    async def _shard_process(self, actor: SimActor, restarted: bool = False) -> Incarnation:
        """A new process of ``actor``, its shard's Bookie (see :meth:`made`)."""
        shard = self.index(actor.key)
        return await self.made(actor, self.shard_url(shard), self.options, None, self.clock,
                               (NAME, self.shard_map.labels[shard]) if self.sharded else None,
                               restarted)

    async def made(self, actor: SimActor, url: str, options: Options, head_only: str | None,
                   clock, shard: tuple[str, str] | None, restarted: bool = False
                   ) -> Incarnation:
        """A new process of ``actor``, its shell made there (``restarted``: as Ray restarts
        an actor, which then reopens its store by itself; else its store not yet opened)."""
        pid = self.pid(f"shard-{actor.key}")
        self.processes[pid] = (actor, restarted)

        async def construct():
            return self.shells(url, options, actor.name, local=True, head_only=head_only,
                               clock=clock, shard=shard)
        made = Incarnation(pid, await run_in(pid, construct()))
        self.incarnations.append(made)
        return made

    def client(self, shard: int) -> Store:
        return self._client(self.actor_at(self.key(shard)), self.shard_url(shard))

    def _client(self, actor: SimActor | None, url: str, options: Options | None = None,
                clock=None) -> Store:
        return Store(SimHandle(self, actor), options or self.options, url,
                     None if actor is None else actor.name, {"head_only": None},
                     clock or self.clock)

    def store(self) -> ShardedStore | Store:
        """A client's handle on the store, with the layout as it is now."""
        if not self.sharded:
            return self.client(0)
        return ShardedStore([self.client(s) for s in range(self.shard_count)], self.shard_map,
                            self.url, NAME, self.options, self.clock, runtime=self.runtime)

    async def close_shard(self, key: str) -> None:
        """A clean close of the Bookie of the shard at ``key``; its process ends with it (its
        actor is opened again in place by the next :meth:`start_shard`)."""
        actor = self.actor_at(key)
        inc, actor.inc = actor.inc, None  # new calls find it gone, as after a close
        self.note(f"close {inc.pid}")
        await run_in(inc.pid, inc.shell.close())
        self._end(inc.pid, StoreClosedError)  # its loops are stopped; nothing of it runs on

    async def reshape(self, kind: str, key: str, kill_after_s: float | None) -> str:
        """Split (``kind="split"``) or move the shard at prefix ``key`` through a running
        store's handle (``cluster/reshape.py``), driven by a process of its own, killed after
        ``kill_after_s`` virtual seconds if given (the Bookies it made end with it); then
        read the layout the store has. Returns how it ended; its shards that run nowhere are
        left for the caller to open, as its user would."""
        handle = self.store()
        shard = handle.shard_map.prefixes.index(key)
        driver = self.pid(f"{kind}ter")
        self.note(f"{kind} shard {shard} in {driver}")
        task = run_in(driver, handle.split_shard_async(shard) if kind == "split" else
                      handle.move_shard_async(shard, self.rng.choice(NODES)))
        if kill_after_s is not None:
            self.loop.call_later(kill_after_s, lambda: task.done() or self.kill(driver))
        while not task.done() and driver not in self.loop.dead:
            await asyncio.sleep(0.05)
        if not task.done():
            outcome = "killed"
        elif task.cancelled():
            outcome = "failed"
        elif task.exception() is not None:
            if not isinstance(task.exception(), LeveledError):
                raise task.exception()  # the caller's check sees it: an untyped error
            outcome = "failed"
        else:
            outcome = "done"
        self.note(f"{kind} of shard {shard} {outcome}")
        root = ObjectStore.from_url(self.url, self.options)
        for _ in range(100):  # the layout's read fails as the object store does
            with contextlib.suppress(LeveledError):
                found = await settle_splits(root, self.shard_map, self.options)
                break
            await asyncio.sleep(1.0)
        split = key not in found.prefixes
        if found.version >= self.shard_map.version:  # a reshape beside it may have read later
            self.shard_map, self.shard_count = found, found.count
        if kind == "split":
            return f"{outcome}, {'split' if split else 'not split'}"
        return outcome if outcome == "done" else (
            f"{outcome}, {'not moved' if self.running_at(key) else 'closed'}")

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
                await self.close_shard(self.key(shard))

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
        self.loop.set_exception_handler(self._unhandled)
        logger = logging.getLogger("leveled_ray")
        seen = _Logged(self)
        logger.addHandler(seen)
        self._patches.callback(logger.removeHandler, seen)
        self._patches.enter_context(deterministic(self.loop, self.seed, self.skew_s))
        objects = self.objects
        self._patches.enter_context(_patched(ObjectStore, "_make_backend",
                                             lambda store: objects.backend(store.location)))
        self._patches.enter_context(_patched(bulk_write, "connect_running",
                                             self._running_store))
        # A process's readers share file clerks (and their loads in flight) with the other
        # readers of the same store in that process only: a load of a killed process must
        # not hold up another's.
        shared = clerk.ClerkHost.shared.__func__
        self._patches.enter_context(_patched(clerk.ClerkHost, "shared", classmethod(
            lambda cls, store, key, cache_bytes: shared(cls, store, (PROCESS.get(), key),
                                                        cache_bytes))))
        # A cross-shard put_many deletes its commit record off the caller's path, in a
        # thread of its own: here, in a task of the caller's process (no thread may race
        # the simulation).
        self._patches.enter_context(_patched(txn, "_RECORD_DELETES", _RecordDeletes()))
        # A handle's coalesced writes send each next call as the one before returns, in the
        # loop: no helper thread lingers for them.
        self._patches.enter_context(_patched(client_store, "COALESCE_LINGER_S", 0.0))
        # A closed store's actor ends as Ray's ray.kill ends it.
        self._patches.enter_context(_patched(client_store.Store, "_killed",
                                             lambda store, _result=None: self._kill(store)))
        return self

    def __exit__(self, *exc) -> None:
        # The tasks still pending (killed processes', and loops that run until a close) end
        # here, while the loop is open: a coroutine collected later would run its cleanup
        # against a closed loop.
        asyncio.events._set_running_loop(self.loop)
        hook = sys.unraisablehook
        sys.unraisablehook = _quiet_cleanups(hook)
        for task in asyncio.all_tasks(self.loop):
            with contextlib.suppress(BaseException):
                task.get_coro().close()
        asyncio.events._set_running_loop(None)
        self._patches.close()
        asyncio.set_event_loop(None)
        with warnings.catch_warnings():
            # The steps an ended process never began (dropped with its queue) are coroutines
            # that never ran: expected, as for any process killed.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            self.loop._ready.clear()
            self.loop._scheduled.clear()
            self.loop.close()
            gc.collect()  # the run's garbage, while its finalizers can still do no harm
        sys.unraisablehook = hook
        gc.unfreeze()
        gc.enable()

    def _kill(self, store: Store) -> None:
        if store._actor._actor is not None:
            self.end_actor(store._actor._actor)

    def _unhandled(self, loop, context: dict) -> None:
        """The loop's exception handler: an error no one retrieved, kept unless its process
        is dead (a killed process's leftovers)."""
        exc, task = context.get("exception"), context.get("task") or context.get("future")
        process = getattr(task, "_context", None)
        if exc is not None and (process is None or process.get(PROCESS) not in self.loop.dead):
            self.unseen.append(exc)

    def counters(self) -> dict[str, int]:
        """Every Bookie process's counters, summed over the run, each named for its part
        (``participant.txn_prepared``): what shows that a run took a path."""
        summed: collections.Counter = collections.Counter()
        for inc in self.incarnations:
            bookie = inc.bookie
            if bookie is None:
                continue
            for part in ("bookie", "participant", "writes", "view", "inker", "penciller"):
                owner = bookie if part == "bookie" else getattr(bookie, part, None)
                for name, value in getattr(owner, "counters", {}).items():
                    if type(value) is int:
                        summed[f"{part}.{name}"] += value
        return dict(summed)

    def untyped_errors(self) -> list[str]:
        """The errors of :attr:`unseen` that are not leveled-ray's typed ones."""
        return [f"{type(e).__name__}: {e}" for e in self.unseen
                if not isinstance(e, LeveledError | asyncio.CancelledError)]

    def run(self, coro, limit_s: float):
        """Run ``coro`` on the world's loop for at most ``limit_s`` virtual seconds."""
        return self.loop.run_until_complete(asyncio.wait_for(coro, limit_s))

    async def _running_store(self, store_name: str, ray_address=None):
        """:func:`leveled_ray.bulk.write.connect_running`, as named actors are found here."""
        actor = self.actors.get(self.pointers.get(store_name, store_name))
        if actor is None:
            raise InvalidArgumentError(f"no running store named {store_name!r}")
        url = f"{self.url}/{actor.key}" if self.sharded else self.url
        return self._client(actor, url)


class SimHandle:
    """A handle on one Bookie actor (``None``: one that is gone), whichever process runs it
    now."""

    def __init__(self, world: World, actor: SimActor | None):
        self._world, self._actor = world, actor

    def __getattr__(self, name: str):
        return _SimMethod(self._world, self._actor, name)


class _SimMethod:
    def __init__(self, world: World, actor: SimActor | None, name: str):
        self.world, self.actor, self.name = world, actor, name

    def remote(self, *args, **kwargs) -> asyncio.Future:
        world = self.world
        future = asyncio.get_running_loop().create_future()
        inc = None if self.actor is None else self.actor.inc
        if inc is None and self.actor is not None and self.actor.restarting:
            return asyncio.ensure_future(self._held(args, kwargs))
        if inc is None:
            future.set_exception(StoreClosedError(f"the Bookie {self.actor and self.actor.name} "
                                                  "is gone"))
            return future
        args, kwargs = _copy((args, kwargs))
        fault = world.call_fault()
        if fault == "refused":
            future.set_exception(StoreUnavailableError(f"simulated fault: {self.name} was not "
                                                       "delivered"))
            return future
        world.in_flight.setdefault(inc.pid, set()).add(future)

        def answer(exc: BaseException | None, result=None, cancelled: bool = False) -> None:
            world.in_flight.get(inc.pid, set()).discard(future)
            if future.done():
                return
            if cancelled:
                exc = StoreClosedError("the call was cancelled")
            elif fault == "lost":
                exc = StoreUnavailableError(f"simulated fault: {self.name} ran and its answer "
                                            "was lost")
            if exc is None:
                try:
                    result = _copy(result)
                except UnpicklableError as unsent:  # the caller sees it: an untyped error
                    exc = unsent
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)

        async def run():
            # The answer is sent in the call's last step (no done callback, no step of its
            # own), and the task ends without an error of its own to retrieve.
            try:
                result = getattr(inc.shell, self.name)(*args, **kwargs)
                if asyncio.iscoroutine(result):
                    result = await result
            except asyncio.CancelledError:
                answer(None, cancelled=True)
                raise
            except Exception as exc:  # noqa: BLE001 - the callee's answer, handed to its caller
                answer(exc)
            else:
                answer(None, result)

        run_in(inc.pid, run())
        return future

    async def _held(self, args, kwargs):
        """A call to an actor that Ray restarts: sent once it runs again."""
        while self.actor.inc is None and self.actor.restarting:
            await asyncio.sleep(0.05)
        return await self.remote(*args, **kwargs)


class SimActorContext:
    """:class:`leveled_ray.actors.failover.RayActor` in the world: what a Bookie's shell
    knows of its actor (by the process it runs in), the world's key-value store, and its
    own end (``die``: Ray restarts it)."""

    def __init__(self, world: World):
        self.world = world

    def begin(self) -> None:
        pass  # no process of its own to keep pandas out of

    def actor_id(self) -> str:
        return self.world.processes[PROCESS.get()][0].id

    def restarted(self) -> bool:
        return self.world.processes[PROCESS.get()][1]

    def get(self, key: bytes) -> bytes | None:
        return self.world.kv.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.world.kv[key] = value

    def delete(self, key: bytes) -> None:
        self.world.kv.pop(key, None)

    def die(self) -> None:
        world, pid = self.world, PROCESS.get()
        actor = world.processes[pid][0]
        world.kill(pid, restarts=True)
        world.loop.call_later(1.0, lambda: actor.ended or actor.inc is not None
                              or actor.key not in world.shard_map.prefixes
                              or run_in(None, world._restart(actor)))


#: The nodes a move picks from (where a Bookie runs is not simulated: a move restarts it).
NODES = ("node-a", "node-b")


class SimRuntime:
    """:class:`leveled_ray.cluster.runtime.Runtime` in the world: Bookies are started in
    processes of its own, named as Ray names actors; placement groups are tokens."""

    def __init__(self, world: World):
        self.world = world

    async def create_bookies(self, specs, options: Options, *, detached: bool,
                             head_only: str | None, clock) -> list[SimActor]:
        world, made = self.world, []
        for spec in specs:
            if spec.name in world.actors:
                self.stop_bookies(made)
                raise ValueError(f"the actor name {spec.name!r} is already taken")  # as Ray
            actor = world.new_actor(spec.name, world.key_of(spec.url),
                                    owner=None if detached else PROCESS.get())
            actor.pending = await world.made(actor, spec.url, options, head_only, clock,
                                             spec.shard)
            world.actors[spec.name] = actor
            world.note(f"create {actor.pending.pid} as {spec.name}")
            made.append(actor)
        return made

    async def ready(self, actors: list[SimActor]) -> None:
        await asyncio.sleep(0)

    async def open_bookies(self, actors: list[SimActor], specs, options: Options,
                           clock) -> list[Store]:
        try:
            infos = await asyncio.gather(*(run_in(a.pending.pid, a.pending.shell.start())
                                           for a in actors))
        except BaseException:
            self.stop_bookies(actors)
            raise
        for actor in actors:
            actor.inc = actor.pending
        return [Store(SimHandle(self.world, actor), options, spec.url, spec.name, info, clock)
                for actor, spec, info in zip(actors, specs, infos)]

    def stop_bookies(self, actors: list[SimActor]) -> None:
        for actor in actors:
            self.world.end_actor(actor)

    async def close_bookie(self, store: Store) -> None:
        """The product's close (:meth:`Store.close`), whose end of the actor ends it here."""
        await store.close_async()

    def resolve(self, name: str) -> str:
        return self.world.pointers.get(name, name)

    def point(self, name: str, actor_name: str) -> None:
        if actor_name == name:
            self.world.pointers.pop(name, None)
        else:
            self.world.pointers[name] = actor_name

    def forget(self, name: str) -> None:
        self.point(name, name)

    async def running_bookies(self, name: str, shard_map: ShardMap,
                              current: Layout) -> Layout | None:
        world = self.world
        mine = dict(zip(current.shard_map.prefixes, current.stores))
        stores = []
        for s, prefix in enumerate(shard_map.prefixes):
            actor = world.actor_at(prefix)
            if actor is None or actor.inc is None:
                return None  # not running (yet): nothing to send the call to
            known = mine.get(prefix)
            stores.append(known if known is not None and known._actor._actor is actor
                          else world._client(actor, shard_map.shard_url(world.url, s)))
        if shard_map.same_layout(current.shard_map) and all(
                a is b for a, b in zip(stores, current.stores)):
            return None
        return Layout(tuple(stores), shard_map)

    async def on_node(self, node_id, name, detached):
        return name

    def bundle(self, group, index: int):
        return None

    def remove(self, group) -> None:
        pass

    def named(self, name):
        return None

    def alive_nodes(self) -> list[str]:
        return list(NODES)


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


class _Logged(logging.Handler):
    """Keeps the exceptions of each warning or error the package logs from a live process
    (a background task's failure is logged with its exception as an argument)."""

    def __init__(self, world: World):
        super().__init__(logging.WARNING)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        if PROCESS.get() in self.world.loop.dead:
            return
        args = record.args if isinstance(record.args, tuple) else ()
        found = [a for a in (*args, record.exc_info and record.exc_info[1])
                 if isinstance(a, BaseException)]
        self.world.unseen.extend(found)


def _quiet_cleanups(hook):
    """``hook``, but silent about a coroutine whose cleanup awaits when it is closed at the
    run's end (a killed process's, stopped inside ``async with``): nothing of it runs."""
    def quiet(unraisable) -> None:
        if not (isinstance(unraisable.exc_value, RuntimeError)
                and "ignored GeneratorExit" in str(unraisable.exc_value)):
            hook(unraisable)
    return quiet


@contextlib.contextmanager
def _patched(owner, name: str, value):
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)
