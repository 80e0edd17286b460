"""One simulated run: a 2-shard store, its clients at work at once, faults and kills, then
the invariants (:mod:`model`).

The clients, each a process of its own:

* **txn writers**: cross-shard ``put_many`` (prepare, commit record, apply);
* **transfer clients**: transactions that move amounts between accounts, and audits that read
  them all (:mod:`transfers`), three at a time on a client's handle (their calls shared),
  their history checked for the isolation's anomalies;
* **bulk writers**: bulk writes through the running store (the Spark writer's path), some of
  unique keys and some contending for :data:`~model.SHARED_KEYS`, waiting a random while
  between writing and committing (so commits come out of begin order), calling ``abort``
  after a commit that raised, as Spark does;
* **stream writers**: micro-batches committed with a ``(writer, batch)`` mark, some sent
  again (a retried Spark batch);
* **readers**: batched reads of earlier writes, checked whole;
* **cutters**: snapshots at a cut, read and checked whole and in order;
* a **consumer** of the change feed that takes one change at a time and restarts from the
  position it saved, often;
* **GC** passes, some with ``min_age=0``;
* **chaos**: kills a shard's Bookie (then restarts it) or a writer's driver, at any step;
* a **closer**: closes a shard's Bookie cleanly at any step (a merge may be in flight), then
  opens it again;
* a **splitter**: splits a shard through a running store's handle, by the product's own code
  (``cluster/reshape.py``, its Bookies made by the world: ``World.runtime``), its
  process killed at a random moment in some runs (the Bookies it made end with it); clients
  that hold the old layout follow the new one (``cluster/redirect.py``), and consumers resume
  their positions in the children;
* a **mover**: moves a shard likewise (a new Bookie made, the shard's closed, the new one
  opened), its process killed at a random moment in some runs.

After a split or move, every shard that runs nowhere is opened again, as its user would.
Then the faults stop, every shard is opened again, undecided parts time out, and the final
state, views of the store as it was at past times, the change feed, the manifests, a reopen
and the consumer are checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import threading
from dataclasses import dataclass, field

import pyarrow as pa
from model import SHARED_KEYS, Model, definite
from transfers import Transfers

import leveled_ray as lr
from leveled_ray.admin.compare import FoldedSide
from leveled_ray.admin.handle import Admin
from leveled_ray.bulk import sharded as bulk
from leveled_ray.cluster.admin import ShardedAdmin
from leveled_ray.cluster.backup import find_shard_map
from leveled_ray.cluster.reader import open_reader
from leveled_ray.codec import object_key
from leveled_ray.errors import CorruptObjectError, LeveledError, StoreUnavailableError
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.shard_map import unfinished
from leveled_ray.manifest.snapshot_leases import CLOCK_SKEW_S
from leveled_ray.manifest.store import ManifestStore
from leveled_ray.manifest.txn_records import txn_of_part
from leveled_ray.replication.actor import check_target
from leveled_ray.replication.replicator import Replication
from leveled_ray.replication.rules import BUCKET
from leveled_ray.testing.sim.loop import EPOCH, PROCESS
from leveled_ray.testing.sim.world import NAME, World


async def answered(call, tries: int = 20):
    """``await call()``, sent again while a fault leaves it unanswered (as a user would)."""
    for _ in range(tries - 1):
        with contextlib.suppress(StoreUnavailableError):
            return await call()
    return await call()


#: Virtual seconds a run may take before it counts as hung.
LIMIT_S = 3600.0
#: Trees of ``small`` size (not the default ``large``: a 4 MiB tree made, copied and saved at
#: every open and close was a tenth of a run's time), checked at ``xsmall`` (a resize).
OPTIONS = lr.Options(ledger=dict(l0_max_keys=40, push_keys=10, push_ms=50, sst_max_keys=30,
                                 tree_size="small"),
                     journal=dict(compaction_interval_s=2.0, small_files=8), txn_timeout_s=5.0,
                     gc=dict(min_age_s=60.0, interval_s=0))

CHECKED_TREE = "xsmall"


@dataclass
class Config:
    """What one seed's run does (drawn from the seed: see :func:`config_of`)."""

    sharded: bool = True
    txn_writers: int = 2
    bulk_writers: int = 2
    stream_writers: int = 1
    ops: int = 3
    fault_rate: float = 0.0
    kills: int = 0
    closes: int = 0
    #: A killed Bookie is restarted as Ray restarts it (failover: it reclaims its epoch, and
    #: its calls in flight fail as unavailable), not reopened.
    failover: bool = False
    splits: int = 0
    moves: int = 0
    #: Hot backups of a sharded store, each to a target of its own; its driver may be killed.
    backups: int = 0
    #: A replicator into a plain store of its own (``lr.replicate``'s loop), killed and
    #: started again at random moments, as Ray restarts it.
    replica: bool = False
    #: Clients of transactions (transfers between accounts and audits: :mod:`transfers`),
    #: at this isolation.
    transfers: int = 0
    isolation: str = "serializable"
    #: A client's transactions begin one after another, each as the one before it commits,
    #: rather than all at once (see :class:`transfers.Transfers`).
    staggered: bool = False
    #: Each process's wall clock is off by up to this many seconds, either way (its own
    #: amount, drawn from its name; the object store's clock is right).
    skew_s: float = 0.0


def config_of(seed: int) -> Config:
    rng = random.Random(seed)
    config = Config(sharded=rng.random() < 0.75, txn_writers=rng.randint(0, 2),
                    bulk_writers=rng.randint(1, 3), stream_writers=rng.randint(0, 1),
                    ops=rng.randint(1, 4),
                    fault_rate=rng.choice([0.0, 0.0, 0.02, 0.05, 0.1]),
                    kills=rng.choice([0, 0, 1, 2]), closes=rng.choice([0, 0, 1, 2]),
                    failover=rng.random() < 0.5)
    # Drawn last, each after the one before: the rest of a seed's run is as it was.
    config.splits = rng.choice([0, 1, 2]) if config.sharded else 0
    config.moves = rng.choice([0, 1, 2]) if config.sharded else 0
    config.backups = rng.choice([0, 1, 2]) if config.sharded else 0
    config.replica = rng.random() < 0.5
    config.transfers = rng.choice([0, 1, 2])
    config.isolation = rng.choice(["serializable", "snapshot"])
    # two processes' clocks differ by up to twice this: at most CLOCK_SKEW_S, the most the
    # product allows (manifest/snapshot_leases.py)
    config.skew_s = rng.choice([0.0, 0.0, CLOCK_SKEW_S / 4, CLOCK_SKEW_S / 2])
    config.staggered = rng.random() < 0.5
    return config


def in_flight_config(seed: int) -> Config:
    """The seed's config on a plain store, with two clients of ``serializable`` transactions
    that begin one after another (``staggered``): they read each other's writes in flight."""
    return dataclasses.replace(config_of(seed), sharded=False, splits=0, moves=0, backups=0,
                               transfers=2, isolation="serializable", staggered=True)


def run_in_flight(seed: int) -> Report:
    """:func:`run` of :func:`in_flight_config`."""
    return run(seed, in_flight_config(seed))


@dataclass
class Backup:
    """One backup the run began: its target, when it was sent, and how it ended."""

    url: str
    sent_at: float
    acked_at: float | None = None
    error: str = ""


@dataclass
class Report:
    seed: int
    config: Config
    violations: list[str]
    checks: dict
    steps: int
    virtual_s: float
    faults: dict
    trace: list[str] = field(repr=False, default_factory=list)
    digest: int = 0
    #: The product's counters, summed over every Bookie process of the run (World.counters).
    counters: dict = field(repr=False, default_factory=dict)


def replay_command(seed: int, config: Config) -> str:
    """The command that runs ``seed`` again as it ran: with its config when it is not the
    seed's own (a test's fixed one)."""
    command = f"make simulate SEEDS=1 FIRST={seed}"
    if config != config_of(seed):
        command += f" CONFIG='{json.dumps(dataclasses.asdict(config))}'"
    return command


def run(seed: int, config: Config | None = None) -> Report:
    """Run ``seed`` (with ``config``, else the seed's own) and check the invariants."""
    config = config or config_of(seed)
    model = Model()
    with World(seed, OPTIONS, 2 if config.sharded else None, config.skew_s) as world:
        try:
            world.run(Run(world, model, config).main(), LIMIT_S)
        except TimeoutError:
            model.violated("every run ends", f"still running after {LIMIT_S:g} virtual s")
        except Exception as exc:  # noqa: BLE001 - an escaped error is a finding too
            model.violated("no call raises an untyped error", f"{type(exc).__name__}: {exc}")
        digest = hash(tuple(sorted((p, v[0]) for p, v in world.objects.objects.items())))
        return Report(seed, config, model.violations, dict(model.checks), world.loop.steps,
                      round(world.loop.now, 3), dict(world.objects.faults), world.trace,
                      digest, world.counters())


class Run:
    def __init__(self, world: World, model: Model, config: Config):
        self.world, self.model, self.config = world, model, config
        self.rng = world.rng
        self.drivers: list[tuple[str, asyncio.Task]] = []  # writers: chaos may kill them
        self.consumed: list = []
        self.backups: list[Backup] = []
        self.respellings = 0  # the source's URL spelled otherwise, checked as a target
        self.position = 0
        self.writing_done = False
        self.transfers = Transfers(model, self.rng, config.isolation, config.staggered)

    def now(self) -> float:
        return self.world.loop.now

    async def pause(self, most_s: float) -> None:
        await asyncio.sleep(self.rng.random() * most_s)

    async def main(self) -> None:
        world, config = self.world, self.config
        await world.create()
        self.store = world.store()
        # The final check reads the feed from 0: hold it from journal compaction (a split's
        # children inherit the lease).
        await self.store.set_history_lease_async("check", 0, LIMIT_S)
        world.objects.fault_rate = config.fault_rate
        for i in range(config.txn_writers):
            self.drivers.append(world.spawn(f"txn{i}", self.txn_writer(i)))
        for i in range(config.bulk_writers):
            self.drivers.append(world.spawn(f"bulk{i}", self.bulk_writer(i)))
        for i in range(config.stream_writers):
            self.drivers.append(world.spawn(f"stream{i}", self.stream_writer(i)))
        for i in range(config.transfers):
            # A handle of its own, as a process has (its commits coalesce with its own).
            self.drivers.append(world.spawn(f"transfers{i}", self.transfers.client(
                world.store(), i, 2 * config.ops, self.pause)))
        for i in range(config.backups):  # a driver: chaos may kill it
            self.drivers.append(world.spawn(f"backup{i}", self.backer(i)))
        others = [world.spawn("reader", self.reader())[1],
                  world.spawn("cutter", self.cutter())[1],
                  world.spawn("consumer", self.consumer())[1],
                  world.spawn("gc", self.gc())[1]]
        if config.replica:
            self.replica = await world.open_other(f"{world.url}-replica", "replica")
            await answered(lambda: self.replica.set_history_lease_async("check", 0, LIMIT_S))
            others.append(world.spawn("replicas", self.replicas())[1])
        chaos = world.spawn("chaos", self.chaos())[1]
        closer = [world.spawn("closer", self.closer())[1]] if config.closes else []
        if config.splits:
            closer.append(world.spawn("splitter", self.reshaper("split", config.splits))[1])
        if config.moves:
            closer.append(world.spawn("mover", self.reshaper("move", config.moves))[1])
        while any(not task.done() and pid not in world.loop.dead
                  for pid, task in self.drivers):
            await asyncio.sleep(1.0)
        self.writing_done = True
        await asyncio.gather(chaos, *closer, *others, return_exceptions=True)
        self.check_tasks([chaos, *closer, *others, *(task for _, task in self.drivers)])
        await self.heal()
        await self.check_final()
        for error in world.untyped_errors():
            self.model.violated("no call raises an untyped error", f"unseen: {error}")

    def check_tasks(self, tasks) -> None:
        """Every client task that ended raised nothing but leveled-ray's typed errors (a task
        of a killed process never ends: it is not looked at). (Every error of a live process
        that no caller saw, a background loop's or a task's never retrieved, is checked at the
        run's end: :meth:`World.untyped_errors`.)"""
        for task in tasks:
            exc = task.exception() if task.done() and not task.cancelled() else None
            if exc is not None and not isinstance(exc, LeveledError):
                self.model.violated("no call raises an untyped error",
                                    f"{type(exc).__name__}: {exc}")

    # -- writers --

    async def txn_writer(self, i: int) -> None:
        """Cross-shard ``put_many`` batches. Writer 1 names its keys with the same text as
        writer 0, as ``bytes``: ``"0.1"`` and ``b"0.1"`` are two keys on every path (reads,
        folds, the feed, trees, backups, the replica)."""
        for k in range(self.config.ops):
            keys = [("t", f"{k}.{j}".encode() if i % 2 else f"{k}.{j}") for j in range(3)]
            op = self.model.new("put_many", keys, f"t{i}.{k}", self.now())
            try:
                await self.store.put_many_async([lr.Put(b, key, op.value) for b, key in keys])
                self.model.ack(op, self.now())
            except LeveledError as exc:
                self.model.fail(op, exc)
            await self.pause(1.0)

    async def bulk_writer(self, i: int) -> None:
        for k in range(self.config.ops):
            shared = self.rng.random() < 0.5
            keys = SHARED_KEYS if shared else [("u", f"{i}.{k}.{j}") for j in range(4)]
            op = self.model.new("bulk", keys, f"b{i}.{k}", self.now())
            plan = messages = None
            try:
                plan = await bulk.begin_write_async(self.world.url, OPTIONS, store_name=NAME)
                messages = [await bulk.write_partition_async(plan, 0, [rows(keys, op.value)])]
                await self.pause(2.0)  # others begin and commit meanwhile: out of order
                await bulk.commit_async(plan, messages)
                self.model.ack(op, self.now())
            except LeveledError as exc:
                self.model.fail(op, exc)
                if messages is not None:  # what Spark does after a failed commit
                    with contextlib.suppress(LeveledError):
                        await bulk.abort_async(plan, messages)
            await self.pause(1.0)

    async def backer(self, i: int) -> None:
        """A hot backup of the running store to a target of its own, at a random moment (see
        :meth:`check_backups`)."""
        await self.pause(10.0)
        backup = Backup(f"{self.world.url}-backup{i}", self.now())
        self.backups.append(backup)
        if self.rng.random() < 0.5:  # its driver killed at a random moment, as a reshape's
            pid, world = PROCESS.get(), self.world
            world.loop.call_later(self.rng.expovariate(10.0),
                                  lambda: backup.acked_at or backup.error or world.kill(pid))
        try:
            await self.store.backup_async(backup.url, progress=False)
            backup.acked_at = self.now()
        except LeveledError as exc:
            backup.error = f"{type(exc).__name__}: {exc}"[:200]
            self.model.checks[f"backups refused: {type(exc).__name__}"] += 1

    async def replicas(self) -> None:
        """The replicator's loop (``replication/replicator.py``) in a process of its own,
        killed at random moments and started again, as Ray restarts it: it resumes from the
        position the target holds. Half of them run a full sync every few seconds."""
        world = self.world
        while not self.writing_done:
            await self.own_url_refused()
            loop = self.replication()
            pid, _ = world.spawn("replicator", loop.run(threading.Event()))
            await asyncio.sleep(self.rng.expovariate(0.2))
            world.kill(pid)
            self.model.checks["replicators killed"] += 1

    async def own_url_refused(self) -> None:
        """A replicator's start checks its target (``replication/actor.check_target``), as
        ``lr.replicate`` does: the source's own URL, spelled otherwise, is refused. Were it
        not, the replicator would open it as its writer, as here: that fences a plain
        source's writer (the probe write fails), and is refused on a sharded one."""
        world = self.world
        self.respellings += 1  # its own random stream: the run goes on as without it
        url = world.url + random.Random(f"respell-{world.seed}-{self.respellings}").choice(
            ["/", "//", "///"])
        try:
            check_target(world.url, url, world.options)
        except lr.InvalidArgumentError:
            self.model.checks["replicas at the source's own URL refused"] += 1
            return
        try:
            await world.open_other(url, "self-replica")
            await self.store.put_many_async([lr.Put("r", "after a replicator's start", b"")])
        except LeveledError as exc:
            self.model.violated("a replicator's target is never its source",
                                f"{url} opened: {exc!r}")

    def replication(self) -> Replication:
        full_sync_s = self.rng.choice([0.0, 5.0])
        return Replication(self.world.store(), self.replica, "sim", full_sync_s=full_sync_s,
                           lifetime=LIMIT_S, clock=self.world.clock)

    async def stream_writer(self, i: int) -> None:
        for batch in range(self.config.ops):
            keys = [("s", f"{i}.{batch}.{j}") for j in range(4)]
            op = self.model.new("stream", keys, f"w{i}.{batch}", self.now())
            failure = None
            for _ in range(1 + (self.rng.random() < 0.5)):  # Spark may run it again
                try:
                    plan = await bulk.begin_write_async(self.world.url, OPTIONS,
                                                        store_name=NAME)
                    messages = [await bulk.write_partition_async(plan, 0,
                                                                 [rows(keys, op.value)])]
                    await self.pause(1.0)
                    await bulk.commit_async(plan, messages, (f"writer-{i}", batch))
                    if op.outcome != "acked":
                        self.model.ack(op, self.now())
                except LeveledError as exc:  # an attempt that may have landed is what counts
                    if failure is None or definite(failure):
                        failure = exc
            if op.outcome != "acked" and failure is not None:  # every attempt failed
                self.model.fail(op, failure)
            await self.pause(1.0)

    # -- readers --

    async def reader(self) -> None:
        while not self.writing_done:
            await self.pause(1.0)
            done = [op for op in self.model.unique() if op.outcome != "pending"]
            if not done:
                continue
            op = self.rng.choice(done)
            sent = self.now()
            try:
                values = await self.store.get_many_async(op.keys)
            except LeveledError:
                continue
            self.model.check_whole(op, values, "get_many", sent, atomic=op.kind == "put_many")

    async def cutter(self) -> None:
        while not self.writing_done:
            await self.pause(3.0)
            sent = self.now()
            ops = [op for op in self.model.unique() if op.sent_at < sent]
            try:  # a handle of the layout as it is now (a snapshot is not redirected)
                snap = await self.world.store().snapshot_async()
            except LeveledError:
                continue
            try:
                keys = [k for op in ops for k in op.keys]
                values = dict(zip(keys, await snap.get_many_async(keys)))
                self.model.check_cut(ops, values, "snapshot", sent)
            except LeveledError:
                pass
            finally:
                with contextlib.suppress(LeveledError):
                    await snap.release_async()

    async def consumer(self) -> None:
        """Take changes one at a time, saving the position after each, and restart from the
        saved position often (a new listener, as a restarted consumer makes)."""
        while not self.writing_done:
            await self.pause(1.0)
            store = self.world.store()  # a restarted consumer's handle: the layout of now
            try:
                feed = store.listen(self.position, name="consumer", lifetime=LIMIT_S,
                                    batch_size=self.rng.randint(1, 4))
            except LeveledError:
                continue
            try:
                for _ in range(self.rng.randint(1, 6)):
                    change = await asyncio.wait_for(feed.__anext__(), 2.0)
                    self.consumed.append((change.bucket, change.key, change.sqn))
                    self.position = feed.sqn
            except (LeveledError, TimeoutError):
                pass
            finally:
                with contextlib.suppress(LeveledError):
                    await feed.close_async()

    async def gc(self) -> None:
        world = self.world
        # Its own random stream for min_age: the rest of a seed's run is as it was before.
        ages = random.Random(f"gc-{world.seed}")
        while not self.writing_done:
            await self.pause(20.0)
            admin = (ShardedAdmin(world.url, world.shard_map, OPTIONS, world.clock)
                     if world.sharded else Admin(world.url, OPTIONS, world.clock))
            # min_age=0 as an operator may pass it: a running writer's uploads must still be safe
            min_age = ages.choice([None, 0.0])
            with contextlib.suppress(LeveledError):
                await admin.gc_async(min_age=min_age)

    async def chaos(self) -> None:
        world = self.world
        for _ in range(self.config.kills):
            await self.pause(8.0)
            if self.rng.random() < 0.6:
                key = self.pick()
                if key is None:
                    continue
                inc = world.running_at(key)
                world.busy.add(key)
                try:
                    if self.config.failover and self.rng.random() < 0.3:
                        world.partition(inc.pid, self.rng.random() * 10.0)  # a zombie
                        self.model.checks["partitions"] += 1
                    else:
                        world.kill(inc.pid, restarts=self.config.failover)
                    await self.pause(3.0)
                    if self.config.failover:
                        await self.failover(key)
                    else:
                        await self.restart(key)
                finally:
                    world.busy.discard(key)
            else:
                alive = [(pid, task) for pid, task in self.drivers if not task.done()]
                if alive:
                    world.kill(self.rng.choice(alive)[0])

    async def closer(self) -> None:
        """Clean closes of a shard's Bookie, each followed by a reopen: close refuses a merge
        that finishes after it began (counted as ``merges refused at close``). A shard whose
        merge is running is closed first, if one comes up within the close's wait."""
        world = self.world
        for _ in range(self.config.closes):
            key = await self.merging(self.rng.random() * 8.0)
            if key is not None:  # close within the merge's time (some 15 ms; a close, 7)
                await self.pause(0.01)
            key = key or self.pick()
            if key is None or world.is_busy(key) or world.running_at(key) is None:
                continue
            inc = world.running_at(key)
            world.busy.add(key)
            try:
                await world.close_shard(key)
                self.model.checks["merges refused at close"] += inc.bookie.counters[
                    "merges_refused"]
                await self.restart(key)
            finally:
                world.busy.discard(key)

    async def reshaper(self, kind: str, count: int) -> None:
        """``count`` splits or moves (``kind``) of a shard, each made through a running
        store's handle by the product's own code (:meth:`World.reshape`) and counted as
        ``kind``; in some, the process making it is killed at a random moment, and the shard
        (or its children) left running nowhere is opened again, as its user would."""
        world = self.world
        for _ in range(count):
            await self.pause(8.0)
            key = self.pick()
            if key is None:
                continue
            world.busy.add(key)
            try:
                kill_after = self.rng.expovariate(4.0) if self.rng.random() < 0.5 else None
                outcome = await world.reshape(kind, key, kill_after)
                self.model.checks[f"{kind}s {outcome}"] += 1
                self.check_reshaped(key, outcome)
                for other in [p for p in world.shard_map.prefixes  # the shard, or its children
                              if (p + ".").startswith(key + ".")]:
                    if world.running_at(other) is None:
                        await self.restart(other)
            finally:
                world.busy.discard(key)

    def check_reshaped(self, key: str, outcome: str) -> None:
        """A split or move that returned or raised (its driver alive) leaves its shards
        running: the children of a split that committed, the shard itself otherwise (a split
        that failed before its commit point opens it again)."""
        world = self.world
        if outcome.startswith("killed"):
            return
        running = [p for p in world.shard_map.prefixes if (p + ".").startswith(key + ".")
                   and world.running_at(p) is not None]
        if not running or len(running) != (2 if outcome.endswith(", split") else 1):
            self.model.violated("a split or move that ends leaves its shards running",
                                f"{outcome} of {key}: running {running}")

    def pick(self) -> str | None:
        """A shard (its prefix) that runs and that no other client is changing, or ``None``
        (drawn among all shards: a busy or stopped one is skipped)."""
        world = self.world
        key = world.key(self.rng.randrange(world.shard_count))
        return None if world.is_busy(key) or world.running_at(key) is None else key

    async def merging(self, most_s: float) -> str | None:
        """A shard that :meth:`pick` could give, whose Penciller has a merge in flight, if
        one comes up within ``most_s``: a close then races the merge's commit."""
        world = self.world
        for _ in range(int(most_s / 0.005)):
            for key in world.shard_map.prefixes if world.sharded else [""]:
                inc = world.running_at(key)
                if (inc is not None and not world.is_busy(key) and inc.bookie.penciller is not None
                        and getattr(inc.bookie.penciller.merging, "sources", ())):
                    return key
            await asyncio.sleep(0.005)
        return None

    async def failover(self, key: str) -> None:
        """Ray restarts the killed Bookie, whose shell reclaims the shard by itself
        (``actors/failover.py``); sometimes a user's open gets there first, and then the
        restarted one must stand down (fenced) and leave the newer writer alone. A claim of
        unknown outcome also makes it stand down. A shard whose Bookie stood down, or was closed
        before its process died (its restart holds no store), is opened again by its user."""
        if self.rng.random() < 0.25:
            for _ in range(100):
                with contextlib.suppress(LeveledError):
                    await self.world.open_elsewhere(key)
                    break
                await asyncio.sleep(1.0)
            outcome = await self.world.failover(key)
            if outcome == "reclaimed":
                self.model.violated("a restarted writer never fences a newer one",
                                    f"{key} was reclaimed after another open")
        else:
            outcome = await self.world.failover(key)
            if outcome == "reclaimed":
                self.model.checks["failovers"] += 1
                return
        self.model.checks[f"restarts {outcome}"] += 1
        await self.restart(key)

    async def restart(self, key: str) -> bool:
        """Open the shard again, as its user does, retrying while the object store fails the
        open."""
        for _ in range(100):
            try:
                await self.world.start_shard(key)
                return True
            except LeveledError:
                await asyncio.sleep(1.0)
        self.model.violated("a shard reopens", f"{key} failed 100 opens")
        return False

    # -- the end --

    async def heal(self) -> None:
        """No more faults; every shard running; every part decided and settled."""
        world = self.world
        world.objects.fault_rate = 0.0
        for shard in range(world.shard_count):
            if world.running(shard) is None:
                await self.restart(world.key(shard))
        await asyncio.sleep(3 * OPTIONS.txn_timeout_s)
        for _ in range(120):
            if not self.parts_left():
                return
            await asyncio.sleep(1.0)
        self.model.violated("every part is settled", f"parts left: {self.parts_left()}")

    def parts_left(self) -> list[str]:
        found = []
        for shard in range(self.world.shard_count):
            base = self.world.shard_url(shard).split("//")[1] + "/"
            found += [p for p in self.world.objects.paths(base + "txn/")
                      if txn_of_part(p[len(base):]) is not None]
        return found

    async def check_final(self) -> None:
        model, world = self.model, self.world
        if world.sharded and self.store.shard_map.count != 2:  # its calls found the split
            model.checks["a handle followed a split"] += 1
        final = await self.read_all("final state")
        await self.check_tree("final state")
        await self.check_past_views()
        await self.check_feed()
        await self.check_manifests()
        await self.check_backups()
        await self.check_replica()
        await world.close_all()
        for shard in range(world.shard_count):
            await self.restart(world.key(shard))
        again = await self.read_all("after a reopen")
        if again != final:
            model.violated("a reopen reads what was there", "values differ after a reopen")
        await self.check_tree("after a reopen")
        await world.close_all()
        await self.check_damage(again)
        if world.sharded and self.rng.random() < 0.5:
            await self.at_rest()

    async def check_damage(self, held: dict) -> None:
        """One bit of one file that a random shard's newest manifest lists is flipped (as a
        disk or a bucket may damage it); then every shard is opened again and every key read
        on its own. Each read returns what the store held (``held``), or raises
        ``CorruptObjectError`` naming the damaged file, and so does an open that fails: wrong
        data is never returned. The bit is put back after. (Its own random stream.)"""
        world, model = self.world, self.model
        rng = random.Random(f"damage-{world.seed}")
        url = world.shard_url(rng.randrange(world.shard_count))
        manifest = (await ManifestStore(ObjectStore.from_url(url, OPTIONS)).latest()).manifest
        names = sorted({f.name for f in manifest.sst_files()} | {j.name for j in manifest.journal})
        if not names:
            return
        name = rng.choice(names)
        path = path_of(url, dict(manifest.stores), name)
        data, made = world.objects.objects[path]
        at = rng.randrange(len(data))
        world.objects.objects[path] = (
            data[:at] + bytes([data[at] ^ 1 << rng.randrange(8)]) + data[at + 1:], made)

        def named(exc: CorruptObjectError) -> bool:
            return exc.path.rsplit("/", 1)[-1] == name.rsplit("/", 1)[-1]

        def failed(exc: Exception, what: str) -> None:
            if isinstance(exc, CorruptObjectError) and named(exc):
                model.checks["damage found"] += 1
            else:
                model.violated("damage is CorruptObjectError naming the damaged file",
                               f"{what}, {name} damaged at {at}: {type(exc).__name__}: {exc}")

        opened = set()
        for shard in range(world.shard_count):
            try:
                await world.start_shard(world.key(shard))
                opened.add(shard)
            except LeveledError as exc:
                failed(exc, f"open of shard {shard}")
        store = world.store()
        for key in held:
            if self.shard_of(*key) not in opened:
                continue
            try:
                [value] = await store.get_many_async([key])
            except LeveledError as exc:
                failed(exc, f"get {key}")
                continue
            if value != held[key]:
                model.violated("damage never returns wrong data",
                               f"{key}: {value!r}, not {held[key]!r} ({name} damaged at {at})")
        model.checks["damaged reads"] += 1
        world.objects.objects[path] = (data, made)
        await world.close_all()

    async def at_rest(self) -> None:
        """The store closed: an offline bulk write (no running store: each shard installs it
        when next opened) races a split at rest of the shard that holds one of its keys, each
        in a process of its own, under the run's faults, one of them killed at a random moment
        in half of the runs; then every shard of the layout found opens, and the write is
        whole or absent (present, if it was acknowledged)."""
        world, model = self.world, self.model
        keys = [("rest", f"r{j}") for j in range(4)]
        op = model.new("bulk", keys, "rest", self.now())

        async def write() -> None:
            plan = await bulk.begin_write_async(world.url, OPTIONS)
            messages = [await bulk.write_partition_async(plan, 0, [rows(keys, op.value)])]
            await self.pause(0.02)  # the commit and the split's claims close together
            try:
                await bulk.commit_async(plan, messages)
                model.ack(op, self.now())
            except LeveledError as exc:
                model.fail(op, exc)

        async def split() -> None:
            await self.pause(0.05)
            admin = ShardedAdmin(world.url, world.shard_map, OPTIONS, world.clock)
            with contextlib.suppress(LeveledError):
                await admin.split_shard_async(self.shard_of(*keys[0]))

        world.objects.fault_rate = self.config.fault_rate
        tasks = [world.spawn("rest-writer", write()), world.spawn("rest-splitter", split())]
        if self.rng.random() < 0.5:
            pid, task = self.rng.choice(tasks)
            world.loop.call_later(self.rng.expovariate(5.0), lambda: task.done() or world.kill(pid))
        while any(not task.done() and pid not in world.loop.dead for pid, task in tasks):
            await asyncio.sleep(0.1)
        self.check_tasks([task for _, task in tasks])
        world.objects.fault_rate = 0.0
        found = await find_shard_map(ObjectStore.from_url(world.url, OPTIONS), OPTIONS)
        world.shard_map, world.shard_count = found, found.count
        for key in found.prefixes:
            await self.restart(key)
        await self.read_all("after an offline bulk write and a split at rest")
        model.checks["at rest"] += 1
        await world.close_all()

    async def check_tree(self, where: str) -> None:
        """The tree the store keeps (each shard's, merged) equals the one a fold makes. A
        tree being folded again (after a crash or a bulk write) is waited for."""
        store = self.world.store()
        for _ in range(60):
            kept = await store.kept_tree_async(CHECKED_TREE)
            if kept is not None:
                break
            await asyncio.sleep(1.0)
        else:
            self.model.violated("a store keeps its tree", f"{where}: none after 60 s")
            return
        if kept != await FoldedSide(CHECKED_TREE, [store], (None, None, None))._fold_tree(store):
            self.model.violated("the kept tree is the folded one", where)
        self.model.checks["kept tree"] += 1

    async def check_past_views(self) -> None:
        """The store as it was soon after each cross-shard batch was sent (while its parts
        were being applied, when a view is likeliest to split one), and at one moment drawn
        from the whole run: whole, nothing later.
        (Its own random stream: the run before it is the same as without it.)"""
        rng = random.Random(f"past-{self.world.seed}")
        ops = self.model.unique()
        keys = [k for op in ops for k in op.keys]
        times = [op.sent_at + rng.expovariate(1.0) for op in ops if op.kind == "put_many"]
        store = self.world.store()
        for past in [*times, rng.uniform(0, self.now())]:
            snap = await store.snapshot_async(at_time=EPOCH + past)
            try:
                values = dict(zip(keys, await snap.get_many_async(keys)))
            finally:
                await snap.release_async()
            self.model.check_past(ops, values, f"snapshot at_time={past:.4f}", past, EPOCH,
                                  self.config.skew_s)

    async def read_all(self, where: str) -> dict:
        model = self.model
        keys = [k for op in model.unique() for k in op.keys] + SHARED_KEYS
        snap = await self.world.store().snapshot_async()  # checked here
        try:
            values = dict(zip(keys, await snap.get_many_async(keys)))
        finally:
            await snap.release_async()
        for op in model.unique():
            model.check_whole(op, [values[k] for k in op.keys], where, self.now())
        model.check_shared([values[k] for k in SHARED_KEYS], where)
        return values

    async def check_feed(self) -> None:
        model = self.model
        changes = [c async for c in self.world.store().changes_async(0)]
        model.check_feed(changes, "changes(0)")
        await self.transfers.check(self.world.store(), changes)
        model.checks["listener"] += 1
        shard_of = self.shard_of
        feed = [(c.shard or 0, c.sqn) for c in changes]
        for shard in range(self.world.shard_count):  # a split's children hold its changes
            got = [sqn for b, k, sqn in self.consumed if shard_of(b, k) == shard]
            upto = got[-1] if got else 0
            want = [sqn for s, sqn in feed if s == shard and sqn <= upto]
            if got != want:
                model.violated("a listener resumes exactly",
                               f"shard {shard}: consumed {got[:20]}..., the feed has "
                               f"{want[:20]}...")

    async def check_backups(self) -> None:
        """Each backup's target, opened as a restore opens it: a cut of the store (each op
        whole or not at all, every op acknowledged before the backup began, a later one only
        with every earlier one), each key once (a split shard's children copied their own
        keys only). A backup that ended before its commit point (failed, or its driver
        killed) leaves a target that no open takes for a store."""
        model = self.model
        for backup in self.backups:
            root = ObjectStore.from_url(backup.url, OPTIONS)
            found = await find_shard_map(root, OPTIONS)  # finishes one past its commit point
            if found is None:
                if await root.list_async("shard-") and not await unfinished(root):
                    model.violated("a half-made backup is never opened",
                                   f"{backup.url} holds shards, unmarked")
                if backup.acked_at is not None:
                    model.violated("an acknowledged backup restores",
                                   f"{backup.url}: no shard map")
                model.checks["backups half made"] += 1
                continue
            admin = ShardedAdmin(backup.url, found, OPTIONS, self.world.clock)
            reader = await open_reader(admin, None, 600.0)
            try:
                keys = [k for op in model.unique() for k in op.keys]
                values = dict(zip(keys, await reader.get_many_async(keys)))
                folded = [k async for k in reader.fold_keys_async()]
            finally:
                await reader.close_async()
            model.check_cut(model.unique(), values, f"backup {backup.url}", backup.sent_at)
            if len(folded) != len(set(folded)):
                model.violated("a restored backup holds each key once",
                               f"{backup.url}: {len(folded) - len(set(folded))} keys twice")
            model.checks["backups restored"] += 1

    async def check_replica(self) -> None:
        """A replicator started last catches up with the source; then a full sync finds
        nothing the stream missed, and the target's feed holds no change twice."""
        if not self.config.replica:
            return
        model, loop = self.model, self.replication()
        await loop.resume()
        for _ in range(120):
            await loop.step()
            if loop.counters["lag_changes"] == 0:
                break
        else:
            model.violated("a replica catches up", f"{loop.counters['lag_changes']} behind")
        try:
            found = await loop.full_sync()
        finally:
            await loop.close()
        if found["differences"]:
            model.violated("a caught-up replica equals its source",
                           f"a full sync found {found}")
        changes = [c async for c in self.replica.changes_async(0) if c.bucket != BUCKET]
        model.check_feed(changes, "the replica's changes(0)")
        model.checks["replica"] += 1

    def shard_of(self, bucket, key) -> int:
        world = self.world
        return world.shard_map.shard_of(object_key(bucket, key)) if world.sharded else 0

    async def check_manifests(self) -> None:
        """Every file the newest manifest of each shard lists exists."""
        self.model.checks["manifest files"] += 1
        for shard in range(self.world.shard_count):
            url = self.world.shard_url(shard)
            latest = await ManifestStore(ObjectStore.from_url(url, OPTIONS)).latest()
            names = ({f.name for f in latest.manifest.sst_files()}
                     | {j.name for j in latest.manifest.journal})
            stores = dict(latest.manifest.stores)  # a split's child reads its parent's files
            missing = sorted(n for n in names
                             if path_of(url, stores, n) not in self.world.objects.objects)
            if missing:
                self.model.violated("every file a manifest lists exists",
                                    f"shard {shard} lists missing {missing[:3]}")


def path_of(url: str, stores: dict, name: str) -> str:
    """Where file ``name`` of the store at ``url`` is (an inherited one, ``@<id>/<name>``, is
    in the store ``stores[id]``)."""
    if name.startswith("@"):
        store_id, _, name = name[1:].partition("/")
        url = stores[store_id]
    return url.split("//")[1] + "/" + name


def rows(keys: list, value: bytes) -> pa.RecordBatch:
    return pa.record_batch({"bucket": [b for b, _ in keys], "key": [k for _, k in keys],
                            "value": [value] * len(keys)})
