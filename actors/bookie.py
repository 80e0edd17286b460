"""The Bookie: the store's public interface (leveled's ``leveled_bookie``), an async Ray actor.

PUT: changes are validated by the client, checked and given SQNs here, and queued for group
commit (:mod:`.group_commit`): every change that arrives while a journal write is in flight
joins the next journal file. All changes of a file are acknowledged once it is durable. Their
Ledger entries then enter the Ledger cache (:mod:`.ledger_cache`) and are pushed to the
Penciller in batches.

The Inker and the Penciller are hosted in this process, plain objects beside the Bookie: a
put's acknowledgement waits for one actor hop (client to Bookie) and one journal write, not for
a second hop to another process, and a store costs one process to start. The clerks, which do
the heavy work (merges, journal compaction), are actors of their own (:mod:`.bookie_clerks`).

GET/HEAD: the cache, then the Ledger's SSTs, then the value by SQN from the Journal, on the
read path that snapshots and readers share (:mod:`leveled_ray.read.views`). The Bookie reads
the files itself through its file clerks, so a lookup costs no extra actor hop. Files that a
merge or compaction replaced are deleted by the reaper (:mod:`.reaper`).
"""

from __future__ import annotations

import asyncio
import functools
import time

import pyarrow as pa

from ..clock import Clock, system_clock
from ..codec import LedgerRows, head_only, holds_index_entries
from ..errors import FencedError, InvalidArgumentError, StoreClosedError
from ..files import warm_start
from ..files.routed import store_for
from ..files.store import ObjectStore
from ..manifest.model import Manifest
from ..manifest.shard_map import read_shard_map
from ..manifest.store import ManifestStore
from ..manifest.transitions import bump_epoch, reclaim_epoch
from ..options import Options
from ..read.views import LedgerFiles
from .bookie_clerks import Clerks
from .bookie_points import PointsInTime
from .bookie_shard_calls import ShardCalls
from .bookie_stats import bookie_stats
from .failover import restartable
from .in_flight import InFlight
from .inker import Inker
from .ledger_cache import LedgerCache
from .live_view import LiveView
from .metrics import Observations, export_every, timed
from .participant import Participant
from .pclerk import NO_MERGES
from .penciller import Penciller
from .reaper import Reaper, gc_loop
from .remote import ValueBatch, as_actor, own_client, unpack
from .snapshot_lease import LeasePublisher
from .tasks import Tasks, watch
from .write_path import WritePath

#: How long ``compact_journal(wait=True)`` waits for reads to see the compaction.
WAIT_ADOPTED_S = 30.0
#: How long a clean close waits for the parts it settled to be deleted from the store.
SETTLE_AT_CLOSE_S = 5.0


class Bookie(ShardCalls, PointsInTime, Clerks):
    """Plain-object logic of the Bookie; :func:`make_actor` gives its Ray actor. Its
    shard-side calls (:class:`.bookie_shard_calls.ShardCalls`) and its snapshots,
    checkpoints, feed and history leases (:class:`.bookie_points.PointsInTime`) are written
    beside it."""

    def __init__(self, url: str, options: Options, name: str | None = None, *,
                 store: ObjectStore | None = None, local: bool = False,
                 head_only: str | None = None, clock: Clock = system_clock,
                 shard: tuple[str, str] | None = None):
        self.url, self.options, self.name = url, options, name
        self.close_begun = False
        # Write calls taken and not yet answered: a close returns only once each has answered.
        # A call whose answer the end of the process lost would fail as closed, which says that
        # nothing was written, and its caller would send it again (see redirect.followed).
        self._write_calls = InFlight()
        # When this Bookie was made (wall time: after its process began and imported the
        # package), how long its start took and when it ended (served_at): a failover's
        # parts, in stats().
        self.opened: dict = {"created_at": round(time.time(), 3)}
        self.shard = shard  # a sharded store's (name or URL, this shard's label)
        self.clock = clock
        self.head_only = head_only
        self.local = local
        self.store = store if store is not None else ObjectStore.from_url(url, options)
        self.cache = LedgerCache(options.ledger.push_keys)
        self.observed = Observations()  # latencies and group sizes, for the metrics
        self.view = LiveView(url, options, self.store, self.cache, lambda: self.reaper.wake.set(),
                             clock)
        self.writes = WritePath(options, self.cache, self.view, head_only=head_only,
                                observations=self.observed)
        self.reaper = Reaper(self.view.host, self._may_delete)
        self.epoch = 0
        self.lost_epoch: int | None = None  # the epoch held before a restart (failover)
        self.inker = self.penciller = self.pclerk = self.iclerk = None
        self.clerks_made: dict = {}  # each clerk's role: a future done once it is made
        self._merges = None  # the merge clerk's run, once it is started
        self.lease: LeasePublisher | None = None
        self.participant: Participant | None = None  # cross-shard parts (from start)
        self.tasks = Tasks("Bookie")
        self._loops: list[asyncio.Task] = []
        self._warming: asyncio.Task | None = None
        self._pusher_task: asyncio.Task | None = None
        self.counters = {"replayed": 0, "gc_deleted": 0, "gc_failures": 0, "gc_stopped": 0,
                         "gc_stopped_reason": None, "gc_failed_deletes": 0,
                         "merges_refused": 0}  # finished after close began (bookie_clerks)

    # -- start-up ------------------------------------------------------------------------------

    async def start(self) -> dict:
        """Claim the store (new writer epoch), fence older writers, replay the Journal tail."""
        began = time.monotonic()
        manifests = self.manifests
        latest = await manifests.latest()
        if latest is None:
            if await read_shard_map(self.store) is not None:
                raise InvalidArgumentError(f"{self.url} holds a sharded store: open it with "
                                           "lr.open, which opens each of its shards")
            settings = {} if self.head_only is None else {head_only.SETTING: self.head_only}
            latest = await manifests.create_initial(Manifest.new(**settings))
        head_only.check_store_mode(self.head_only, latest.manifest.setting(head_only.SETTING),
                                   self.url)
        latest = await self._claim(latest)
        mid, m = latest
        self.epoch = m.writer_epoch
        if m.stores:  # a clone: its ancestors' files are read from their stores
            self.store = store_for(self.store, m.stores, self.options)
            self.view.use_store(self.store)
            self.reaper.host = self.view.host
        if self.view.disk_cached(m):
            self._warming = self.tasks.start(self._warm_start(m), "warm start")
        # The Inker and the Penciller live in this process (each actor costs a process); the
        # clerks, which this actor owns, start when they have work (:mod:`.bookie_clerks`).
        self.inker = Inker(own_client(self.store, self.local), self.options, self.clock,
                           self.epoch, latest)
        self.penciller = Penciller(own_client(self.store, self.local), self.options,
                                   self.clock, self.epoch, latest, journal=self.inker)
        self.penciller.tree.host = self.view.host  # its reads' files stay while read
        await self.penciller.tree.open(m)
        if self.penciller.merge_due():
            self._merge_clerk()
        opened = await self.inker.open()
        self.inker.attach_clerk(self._compaction_clerk)
        self.view.reset(mid, m, opened["files"])
        self.lease = LeasePublisher(self.store, self.options, self.epoch, self._lease_floors,
                                    self.clock, self._uploads_since)
        await self.lease.start(mid)  # before any snapshot can be taken
        self.writes.replayed(m.ledger_sqn)
        self._pusher_task = self.tasks.start(self._pusher(), "pusher")
        self._loops = [self.tasks.start(loop, name) for loop, name in (
            (self.writes.writer.run(self.inker), "journal writer"),
            (watch(lambda: self.penciller.wait_view(self.view.files.version),
                   self._adopt, self.writes.stopped), "ledger watcher"),
            (watch(lambda: self.inker.wait_journal(self.view.journal_version),
                   self.view.adopt_journal, self.writes.stopped), "journal watcher"),
            (self.reaper.run(), "reaper"),
            (self.lease.run(), "snapshot lease"),
            (gc_loop(self.store, self.options, self.counters, self.lease.flush, self.clock),
             "gc"))]
        if self._warming is not None:
            self._loops.append(self.tasks.start(
                warm_start.keep_saving(self.view.host, self.view.values), "hot list"))
        if self.options.metrics_interval_s and not self.local:
            store_tag, shard = self.shard or (self.name or self.url, "")
            self._loops.append(self.tasks.start(export_every(
                self.options.metrics_interval_s, store_tag, self.stats, self.observed,
                str(shard)), "metrics"))
        started = time.monotonic()
        cursor: int | None = 0
        while cursor is not None:
            batch, top, cursor = await self.inker.replay(m.ledger_sqn, cursor)
            self.cache.add_durable(LedgerRows.from_batch(batch))
            self.writes.replayed(top)
            self.counters["replayed"] += batch.num_rows
            await self._push()  # replay waits for the Penciller: memory stays bounded
        self.writes.resume(
            max(self.writes.durable_sqn, opened["max_sqn"], m.ledger_sqn) + 1,
            self.cache.holds_index_entries() or holds_index_entries(
                f.min_key for level in m.levels for f in level))
        self.participant = Participant(self.store, self.options, self.writes, self.clock,
                                       self.epoch, self._install_files)
        await self.participant.recover()  # parts prepared before a restart: before any write
        await self._warm_for(self.options.disk_cache.warm_s)
        self.opened.update(open_s=round(time.monotonic() - began, 3),
                           replay_s=round(time.monotonic() - started, 3),
                           served_at=round(time.time(), 3))
        return {"epoch": self.epoch, "manifest_id": mid, "head_only": self.head_only,
                "replayed": self.counters["replayed"], "replay_s": self.opened["replay_s"],
                "next_sqn": self.writes.next_sqn}

    async def _claim(self, latest):
        """Take the store over with the next writer epoch: older writers are fenced. After a
        restart (failover, :mod:`.failover`), only if no one opened it meanwhile."""
        if self.lost_epoch is None:
            return await self.manifests.update(bump_epoch, latest)
        return await self.manifests.update(
            functools.partial(reclaim_epoch, lost_epoch=self.lost_epoch), latest)

    # -- writes --------------------------------------------------------------------------------

    # Whether the store accepts writes is its write path's to say (:class:`.WritePath`).

    @property
    def broken(self) -> BaseException | None:
        return self.writes.broken

    @property
    def closing(self) -> bool:
        return self.writes.closing

    @property
    def closed(self) -> bool:
        return self.writes.closed

    def _check_readable(self, lkeys: list[bytes] = ()) -> None:
        if self.closed:
            raise StoreClosedError("the store is closed")
        if isinstance(self.broken, FencedError):
            self.writes.check_usable()
        if (owns := self.view.files.owns) is not None:  # a split shard: its own keys only
            owns.refuse_others(lkeys, self.url)

    @timed("leveled_put_latency_seconds")
    async def put_many(self, packed_changes: bytes, values: ValueBatch) -> list[int]:
        """Write changes (a :func:`~.remote.pack`-ed list of :class:`Change`) as one atomic,
        durable group; returns their SQNs in order."""
        self.writes.check_usable()
        with self._write_calls.one():
            return await self.writes.put_many(unpack(packed_changes), values)

    @timed("leveled_put_latency_seconds")
    async def put_parts(self, packed: bytes, values: list) -> list:
        """Write several callers' changes at once (a client's coalesced puts and deletes):
        ``packed`` is the :func:`~.remote.pack`-ed ``(changes, counts)``, or ``(changes,
        counts, deps)`` with transactions' reads of writes in flight, ``values`` their values
        in order. Each part's conditions hold or fail on its own; returns each part's first
        SQN, or its error (see :meth:`.write_path.WritePath.put_parts`)."""
        self.writes.check_usable()
        changes, counts, *deps = unpack(packed)
        with self._write_calls.one():
            return await self.writes.put_parts(changes, counts, ValueBatch(inline=values),
                                               deps=deps[0] if deps else None)

    # -- keeping up with the Penciller and the Inker --------------------------------------------

    async def _push(self) -> None:
        await self.cache.push(lambda: self.writes.durable_sqn,
                              lambda batch, upto: self.penciller.push(batch, upto))

    async def _pusher(self) -> None:
        try:
            await self.cache.run_pusher(
                lambda: self.writes.durable_sqn, lambda b, upto: self.penciller.push(b, upto),
                self.options.ledger.push_ms / 1000.0, lambda: self.closing)
        except Exception as exc:  # no later push may move the persisted SQN past these
            self.writes.stopped(exc)

    def _adopt(self, files: LedgerFiles) -> None:
        advanced = files.persisted_sqn > self.view.files.persisted_sqn
        self.view.adopt(files)
        if self.penciller.merge_due():
            self._merge_clerk()
        if self.head_only and advanced:  # the Inker deletes the journal files now in SSTs
            self.tasks.start(self._start_compaction(), "journal trim")

    async def _start_compaction(self) -> str:
        return self.inker.compact()

    def _uploads_since(self) -> float | None:
        """When the oldest upload this writer may still publish began: the Penciller's, the
        Inker's, or a bulk write's begun through it (written by other processes)."""
        return min((t for t in (self.penciller.uploads_since(),
                                self.inker.uploads_since(),
                                self.writes.bulk_since(self.options.gc.publish_window_s))
                    if t is not None), default=None)

    def _lease_floors(self) -> tuple[int, int]:
        """Per kind (SSTs, journal files), the oldest version this writer's view, and the
        reads running on it (whose kind is not told apart), use."""
        reading = self.view.host.reader_versions()
        return (min([self.view.files.version, *reading]),
                min([self._journal_view_version(), *reading]))

    def _journal_view_version(self) -> int:
        """The version the journal view is as good as. Once the view has adopted the Inker's
        last compaction, no file it reads was removed since, so every later version of the
        Inker's lists them all: it is as good as the Inker's newest."""
        if self.view.journal_version >= self.inker.journal_version:
            return max(self.view.journal_version, self.inker.latest.id)
        return self.view.journal_version

    def _may_delete(self, kind: str, version: int):
        if kind == "sst":
            return self.penciller.may_delete(version)
        return self.inker.may_delete(version)

    # -- reads ---------------------------------------------------------------------------------

    async def get(self, lkey: bytes) -> bytes | None:
        return (await self.get_many([lkey]))[0]

    async def head(self, lkey: bytes) -> tuple | None:
        """The key's live entry as a plain tuple (see :meth:`head_many`)."""
        return (await self.head_many([lkey]))[0]

    @timed("leveled_get_latency_seconds")
    async def get_many(self, lkeys: list[bytes]) -> list[bytes | None]:
        self._check_readable(lkeys)
        if self.writes.locks:  # a key of an undecided cross-shard batch: wait for it
            await self.writes.wait_unlocked(lkeys)
        return await self.view.get_many(lkeys)

    async def get_values(self, lkeys: list[bytes]) -> pa.Array:
        """:meth:`get_many` as one Arrow binary array (null where absent): what a client is
        sent. Ray carries its buffers as they are, where a list is pickled value by value
        (1 000 values of 1 KiB: about 3.3 against 4.1 ms for the round trip here)."""
        return pa.array(await self.get_many(lkeys), pa.binary())

    @timed("leveled_get_latency_seconds")
    async def head_many(self, lkeys: list[bytes]) -> list[tuple | None]:
        """The keys' live entries as plain tuples, which the client makes :class:`Head`
        objects (cheaper to send)."""
        self._check_readable(lkeys)
        if self.writes.locks:
            await self.writes.wait_unlocked(lkeys)
        return await self.view.head_many(lkeys)

    async def read_versions(self, lkeys: list[bytes], values: bool = True
                            ) -> tuple[list[tuple | None], pa.Array | None]:
        """A transaction's read: the keys' live entries as of one moment (their SQNs are
        their versions), and with ``values`` each version's value, as one Arrow array. A key
        whose change has its SQN but is not durable yet is read once the writes given SQNs
        so far are done: the version before it would make the commit conflict for certain."""
        self._check_readable(lkeys)
        if self.writes.locks:
            await self.writes.wait_unlocked(lkeys)
        last = self.writes.last_group
        if last is not None and not last.future.done() and any(
                k in self.cache.pending for k in lkeys):
            await asyncio.wait([last.future])
        entries, found = await self.view.read_versions(lkeys, values)
        return entries, None if found is None else pa.array(found, pa.binary())

    async def get_many_checked(self, lkeys: list[bytes]) -> tuple[pa.Array, int, dict]:
        """:meth:`get_values`, with what a sharded store's batched read needs to return whole
        cross-shard batches: how many parts this shard had prepared when the read began, and
        the part numbers noted for keys that recent batches wrote (see
        :func:`leveled_ray.cluster.fanout.stale_shards`)."""
        began = self.participant.began()
        return await self.get_values(lkeys), began, self.participant.notes(lkeys)

    async def head_many_checked(self, lkeys: list[bytes]) -> tuple[list, int, dict]:
        """:meth:`head_many`, with the same as :meth:`get_many_checked`."""
        began = self.participant.began()
        return await self.head_many(lkeys), began, self.participant.notes(lkeys)

    async def current_sqns(self, lkeys: list[bytes]) -> list[int | None]:
        """The SQN each key's newest Ledger entry has (``None`` if the Ledger has none): what
        journal compaction asks to tell current entries from replaced ones."""
        return [None if e is None else e.sqn for e in await self.view.entries(lkeys)]

    async def index_query(self, query: dict) -> list:
        """A bounded index query (``max_results`` set), answered here in one round trip."""
        self._check_readable()
        return await self.view.index_query(query, self.writes.durable_sqn)

    async def compact_journal(self, wait: bool = False) -> str | dict:
        """Start a journal compaction now: ``"started"``, or ``"busy"`` if one is running.
        L0 memory is persisted first: compaction drops only entries the Ledger's files hold.
        With ``wait``, wait for it (or the one running) and until reads see its files:
        returns the files it removed and added, and where history now begins."""
        self.writes.check_usable()
        if len(self.cache.unpushed):
            await self._push()
        await self.penciller.persist()
        started = self.inker.compact()
        if not wait:
            return started
        result = await self.inker.wait_compaction()
        deadline = time.monotonic() + WAIT_ADOPTED_S
        while (self.view.journal_version < self.inker.journal_version
               and time.monotonic() < deadline):
            await asyncio.sleep(0.01)  # the journal watcher adopts it
        return {"removed": len(result.removed), "added": len(result.added),
                "history_sqn": self.view.history_sqn}

    # -- admin ---------------------------------------------------------------------------------

    def get_options(self) -> Options:
        return self.options

    def get_clock(self) -> Clock:
        return self.clock

    @property
    def manifests(self) -> ManifestStore:
        return ManifestStore(self.store)

    async def _warm_start(self, manifest: Manifest) -> None:
        began = time.monotonic()
        blocks = await self.view.warm_start(manifest)
        self.opened.update(warmed=blocks, warm_s=round(time.monotonic() - began, 3))

    async def _warm_for(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the warm start begun at the open (it goes on after)."""
        if seconds and self._warming is not None:
            await asyncio.wait([self._warming], timeout=seconds)

    async def stats(self) -> dict:
        merges = await self.clerk_stats("pclerk", NO_MERGES)
        return bookie_stats(self, self.inker.stats() if self.inker else {},
                            self.penciller.stats() if self.penciller else {}, merges,
                            await self.clerk_stats("iclerk", {}))

    async def close(self) -> None:
        """Finish queued writes, persist L0 memory and the journal catalog, stop the actors."""
        if self.closed:
            return
        self.close_begun = True  # (writes are refused only once prepared parts are settled)
        if self.participant is not None and self.broken is None:
            await self.participant.settle_all(SETTLE_AT_CLOSE_S)
        self.writes.begin_close()  # writers held by a cut, a bulk install or a lock give up
        self.cache.persisted.set()  # and so do those held by backpressure
        await self.writes.writer.idle.wait()
        await self._write_calls.none()  # the writes it took are durable: each has answered too
        self.cache.wake_pusher.set()
        if self._pusher_task is not None:
            await asyncio.gather(self._pusher_task, return_exceptions=True)
        if self.pclerk is not None:
            await self._stop_merges()
        await self.tasks.cancel(*self._loops)  # they hold no changes: the writer is idle
        if self._warming is not None:
            await self.tasks.cancel(self._warming)
            if self.broken is None:  # the next open on this node starts warm
                await warm_start.save_now(self.view.host, self.view.values)
        if self.participant is not None:
            await self.participant.close()
        try:
            if self.broken is None:
                await self._push()
                await self.penciller.close()
                await self.inker.close()
            if self.lease is not None:  # only the snapshots handed out still need anything
                await self.lease.close()
        finally:
            self.writes.end_close()
            if not self.local:
                import ray

                for clerk in self.clerks():
                    ray.kill(clerk, no_restart=True)

    def actor_handles(self) -> list:
        return [] if self.local else self.clerks()


def make_actor():
    return as_actor(restartable(Bookie), max_concurrency=1000)

