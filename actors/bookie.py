"""The Bookie: the store's public interface (leveled's ``leveled_bookie``), an async Ray actor.

PUT: changes are validated by the client, given SQNs here, and grouped: every change that arrives
while a journal write is in flight joins the next group, which the Inker writes as one journal
file. All changes of a group are acknowledged once that file is durable. Their Ledger entries
then enter the Bookie's cache of recent changes (a ``SortedDict``) and are pushed to the
Penciller in batches.

GET/HEAD: the cache, then the Ledger's SSTs, then the value by SQN from the Journal. The Bookie
reads the files itself through its file clerks, so a lookup costs no extra actor hop. Cache
entries leave once the Penciller reports them persisted in an SST.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from itertools import repeat

from sortedcontainers import SortedDict

from ..admin import gc as garbage_collection
from ..admin.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
)
from ..codec import (
    IF_ABSENT,
    NO_CONDITION,
    OP_PUT,
    PACKED_EXTRA,
    TAG_OBJECT,
    Change,
    Head,
    LedgerRows,
    entry_to_head,
    head_only,
    is_live,
    now_ms,
    split_object_key,
)
from ..codec.index_terms import change_entry, resolve_all
from ..errors import (
    ConditionFailedError,
    FencedError,
    InvalidArgumentError,
    ObjectStoreError,
    StoreClosedError,
)
from ..files.clerk import ClerkHost, LruCache
from ..files.names import ulid
from ..files.outcomes import RetryPolicy
from ..files.routed import store_for
from ..files.store import ObjectStore
from ..manifest.ingest import WINDOW_SQNS, IngestConflictError, reserve_base
from ..manifest.model import Checkpoint, Manifest
from ..manifest.store import ManifestStore
from ..manifest.transitions import bump_epoch
from ..options import Options
from ..read.key_ranges import index_range
from ..read.point_in_time import PointInTime
from ..read.queries import index_entries
from ..read.views import JournalIndex, LedgerFiles, journal_fetch_many, ledger_get
from .group_commit import Group, split_queue
from .iclerk import InkerClerk
from .inker import Inker
from .pclerk import PencillerClerk
from .penciller import Penciller
from .remote import (
    NAMESPACE,
    LocalHandle,
    ValueBatch,
    as_actor,
    call,
    pack,
    process_stats,
    unpack,
    wait_set,
)
from .tasks import Tasks

_GATHER = 256  # concurrent lookups per get_many chunk


class Bookie:
    """Plain-object logic of the Bookie; :func:`make_actor` gives its Ray actor."""

    def __init__(self, url: str, options: Options, name: str | None = None, *,
                 store: ObjectStore | None = None, local: bool = False,
                 head_only: str | None = None):
        self.url = url
        self.head_only = head_only
        self.options = options
        self.name = name
        self.local = local
        self.store = store if store is not None else ObjectStore.from_url(url, options)
        self._file_budget = options.cache_size - options.cache_size // 4
        self.host = ClerkHost(self.store, self._file_budget)
        self.values = LruCache(options.cache_size // 4)
        self.cache: SortedDict = SortedDict()  # ledger key -> entry, not yet in an SST
        self.cache_log: deque[tuple[int, bytes]] = deque()  # (sqn, key) in SQN order
        self.pending: dict[bytes, tuple] = {}  # object key -> its entry, not yet durable
        #: Whether any object may hold index terms: then every change is resolved against
        #: the object's current entry (see :mod:`leveled_ray.codec.index_terms`).
        self.indexed = False
        self.queue: deque[Group] = deque()
        self.queued_bytes = 0
        #: Groups whose journal write had an unknown outcome: the Inker settles it (resend or
        #: seal) before anything else is written; until then new writes wait, boundedly.
        self.in_doubt: list[Group] = []
        self._settled = asyncio.Event()
        self._settled.set()
        self.unpushed = LedgerRows()
        # Batches pushed to the Penciller and not yet in an SST, as (SQN pushed up to, batch):
        # with the unpushed rows, every change the Ledger files lack, in SQN order.
        self.pushed: deque[tuple[int, object]] = deque()
        self.durable_sqn = 0
        self.next_sqn = 1
        self.epoch = 0
        self.files = LedgerFiles(-1, ((),), 0)
        self.journal = JournalIndex()
        self.inker = self.penciller = self.pclerk = self.iclerk = None
        self.journal_version = -1
        self._clerk_run = None
        self.broken: BaseException | None = None
        self.closing = self.closed = False
        self._wake_writer = asyncio.Event()
        self._wake_pusher = asyncio.Event()
        self._wake_reaper = asyncio.Event()
        self._persisted = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._push_lock = asyncio.Lock()
        # Closed while a bulk write is installed: no change gets an SQN meanwhile.
        self._writes_open = asyncio.Event()
        self._writes_open.set()
        self._ingest_lock = asyncio.Lock()
        self.reserved_upto = 0  # end of the SQN windows reserved for bulk writes
        self.tasks = Tasks("Bookie")
        self._loops: list[asyncio.Task] = []
        self._pusher_task: asyncio.Task | None = None
        self.counters = {"groups": 0, "changes": 0, "replayed": 0, "gets": 0, "heads": 0,
                         "journal_reads": 0, "files_deleted": 0, "throttled_writes": 0,
                         "throttle_ms": 0, "gc_deleted": 0, "gc_failures": 0,
                         "in_doubt_groups": 0, "reaper_failures": 0}
        self.last_gc_error: str | None = None

    # -- start-up ------------------------------------------------------------------------------

    async def start(self) -> dict:
        """Claim the store (new writer epoch), fence older writers, replay the Journal tail."""
        manifests = ManifestStore(self.store)
        latest = await manifests.latest()
        if latest is None:
            settings = {} if self.head_only is None else {head_only.SETTING: self.head_only}
            latest = await manifests.create_initial(Manifest.new(**settings))
        head_only.check_store_mode(self.head_only, latest[1].setting(head_only.SETTING),
                                   self.url)
        mid, m = await manifests.update(bump_epoch, latest)
        self.epoch = m.writer_epoch
        if m.stores:  # a clone: its ancestors' files are read from their stores
            self.store = store_for(self.store, m.stores, self.options)
            self.host = ClerkHost(self.store, self._file_budget)
        self.inker = self._spawn(Inker, "inker", (mid, m))
        self.penciller = self._spawn(Penciller, "penciller", (mid, m))
        self.pclerk = self._spawn(PencillerClerk, "pclerk", None)
        self._clerk_run = self.pclerk.run.remote()  # polls the Penciller until stopped
        self.iclerk = self._spawn(InkerClerk, "iclerk", None)
        opened = await call(self.inker.open)
        await call(self.penciller.attach_inker, self.inker)
        await call(self.inker.attach_clerk, self.iclerk)
        self.journal_version = mid
        self.journal = JournalIndex(opened["files"])
        self.files = LedgerFiles(mid, m.levels, m.ledger_sqn)
        self.durable_sqn = m.ledger_sqn
        self._pusher_task = self.tasks.start(self._pusher(), "pusher")
        self._loops = [self.tasks.start(t(), t.__name__.strip("_")) for t in
                       (self._journal_writer, self._watch_ledger, self._watch_journal,
                        self._reaper, self._gc_loop)]
        started = time.monotonic()
        cursor: int | None = 0
        while cursor is not None:
            batch, top, cursor = await call(self.inker.replay, m.ledger_sqn, cursor)
            rows = LedgerRows.from_batch(batch)
            self._add_durable_rows(rows)
            self._append_unpushed(rows)
            self.durable_sqn = max(self.durable_sqn, top)
            self.counters["replayed"] += batch.num_rows
            await self._push()  # replay waits for the Penciller: memory stays bounded
        self.next_sqn = max(self.durable_sqn, opened["max_sqn"], m.ledger_sqn) + 1
        # Index keys (tag "i") sort before object keys: any file or cached key below the
        # first object key means some object may hold index terms.
        self.indexed = any(f.min_key < TAG_OBJECT for level in m.levels for f in level) or (
            bool(self.cache) and self.cache.keys()[0] < TAG_OBJECT)
        return {"epoch": self.epoch, "manifest_id": mid, "head_only": self.head_only,
                "replayed": self.counters["replayed"],
                "replay_s": round(time.monotonic() - started, 3), "next_sqn": self.next_sqn}

    def _spawn(self, cls, role: str, manifest):
        """Start the Inker, the Penciller or the Penciller's clerk: a Ray actor owned by this
        one (they live and die together), or a plain object here when running without Ray."""
        if cls is PencillerClerk:
            args = (self.store, self.options, self.penciller)
        elif cls is InkerClerk:
            args = (self.store, self.options, self._self_handle())
        else:
            args = (self.store, self.options, self.epoch, manifest)
        if self.local:
            return LocalHandle(cls(*args))
        name = f"{self.name}.{role}" if self.name else None
        return as_actor(cls, max_concurrency=64).options(namespace=NAMESPACE,
                                                          name=name).remote(*args)

    def _self_handle(self):
        if self.local:
            return LocalHandle(self)
        import ray

        return ray.get_runtime_context().current_actor

    # -- writes --------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        """Writes are refused only after close, fencing, or the loss of the store's actors."""
        if isinstance(self.broken, FencedError):
            raise FencedError(str(self.broken), epoch=self.broken.epoch,
                              current_epoch=self.broken.current_epoch)
        if self.broken is not None:
            raise StoreClosedError(f"the store stopped after an error: {self.broken}")
        if self.closing or self.closed:
            raise StoreClosedError("the store is closed")

    async def put_many(self, packed_changes: bytes, values: ValueBatch) -> list[int]:
        """Write changes (a :func:`~.remote.pack`-ed list of :class:`Change`) as one atomic,
        durable group; returns their SQNs in order."""
        self._check_usable()
        changes: list[Change] = unpack(packed_changes)
        if not changes:
            return []
        if self.head_only and any(c.op == OP_PUT and c.extra[:1] != PACKED_EXTRA
                                  for c in changes):
            raise InvalidArgumentError("this store is head_only: write to it through a "
                                       "handle that knows (lr.open(..., head_only=...))")
        conditional = [c.lkey for c in changes if c.condition != NO_CONDITION]
        await self._wait_settled()
        while True:
            await self._writes_open.wait()
            await self._backpressure()
            stored: dict[bytes, tuple | None] = {}
            if conditional or self.indexed:
                stored = await self._current_entries(
                    {c.lkey for c in changes} if self.indexed else set(conditional))
            if self._writes_open.is_set():
                break  # else a bulk write is being installed: look again after it
        # From here to the allocation nothing awaits, so no other change can slip in.
        now_s = time.time()
        if conditional:
            self._check_conditions(changes, stored, now_s)
        if self.indexed or any(c.indexes for c in changes):
            changes = resolve_all(changes, lambda k: self._known_entry(k, stored), now_s)
            self.indexed = True
        return await self._allocate(changes, values).future

    async def _wait_settled(self) -> None:
        """While an earlier write's outcome is being settled (the object store does not answer),
        wait for it, at most ``write_resolve_s``; then fail, definitely: nothing was sent."""
        if self.in_doubt and not await wait_set(self._settled, self.options.write_resolve_s):
            raise ObjectStoreError(
                "not written: the object store has not answered for "
                f"{self.options.write_resolve_s:g}s, and an earlier write is being settled",
                definite=True)
        self._check_usable()

    async def _backpressure(self) -> None:
        """Slow writers down while the Ledger falls behind (leveled #402): changes not yet in
        an SST live in this process, so their number must stay bounded."""
        limit = self.options.max_unpersisted_keys
        backlog = len(self.cache_log)
        if backlog < limit // 2:
            return
        started = time.monotonic()
        self.counters["throttled_writes"] += 1
        if backlog < limit:  # a delay in proportion to the backlog, at most max_write_delay_ms
            share = (backlog - limit // 2) / max(1, limit - limit // 2)
            await asyncio.sleep(self.options.max_write_delay_ms / 1000.0 * share)
        while len(self.cache_log) >= limit and not (self.closing or self.broken):
            self._wake_pusher.set()  # make sure everything reached the Penciller
            self._persisted.clear()
            await self._persisted.wait()
        self.counters["throttle_ms"] += round((time.monotonic() - started) * 1000)
        self._check_usable()

    async def _current_entries(self, keys: set[bytes]) -> dict[bytes, tuple | None]:
        """The Ledger entries of the keys that are neither pending nor cached, read so that
        the caller can use them with what is pending and cached, with no await in between."""
        stored: dict[bytes, tuple | None] = {}
        while True:
            files = self.files
            looked = [k for k in keys
                      if k not in self.pending and k not in self.cache and k not in stored]
            if not looked:
                return stored
            stored.update(zip(looked, await self._entries(looked)))
            self._check_usable()
            if self.files is not files:  # the Ledger's files changed meanwhile: look again
                stored = {}

    def _known_entry(self, lkey: bytes, stored: dict) -> tuple | None:
        entry = self.pending.get(lkey)
        if entry is None:
            entry = self.cache.get(lkey)
        return stored.get(lkey) if entry is None else entry

    def _check_conditions(self, changes: list[Change], stored: dict, now_s: float) -> None:
        """Check ``if_sqn``/``if_absent`` against the keys' current SQNs."""
        shadow: dict[bytes, tuple] = {}
        failures = []
        sqn = self.next_sqn
        for change in changes:
            if change.condition != NO_CONDITION:
                entry = shadow.get(change.lkey) or self._known_entry(change.lkey, stored)
                current = entry[0] if is_live(entry, now_s) else None
                if (change.condition == IF_ABSENT and current is not None) or (
                    change.condition >= 0 and current != change.condition
                ):
                    bucket, key = split_object_key(change.lkey)
                    expected = None if change.condition == IF_ABSENT else change.condition
                    failures.append((bucket, key, expected, current))
            shadow[change.lkey] = change_entry(change, sqn, 0)
            sqn += 1
        if failures:
            raise ConditionFailedError(f"{len(failures)} condition(s) failed: {failures[:5]}",
                                       tuple(failures))

    def _allocate(self, changes: list[Change], values: ValueBatch) -> Group:
        """Give the changes SQNs and queue them for the next journal group."""
        lm = now_ms()
        first = self.next_sqn
        self.next_sqn += len(changes)
        sqns = range(first, first + len(changes))
        # Work on columns: transposing the tuples and zipping columns runs in C.
        ops, lkeys, sizes, hashes, indexes, expiries, extras, _ = zip(*changes)
        rows = LedgerRows.from_changes(sqns, ops, lkeys, sizes, hashes, indexes, expiries,
                                       extras, lm)
        self.pending.update(zip(lkeys, map(change_entry, changes, sqns, repeat(lm))))
        records = (first, lm, ops, lkeys, indexes, expiries, extras)
        nbytes = sum(sizes) + sum(map(len, lkeys))
        group = Group(sqns, records, values, rows, nbytes)
        self.queue.append(group)
        self.queued_bytes += nbytes
        self._idle.clear()
        self._wake_writer.set()
        return group

    async def _journal_writer(self) -> None:
        """Group commit: one journal file for everything queued while the last one was written."""
        while True:
            if self.in_doubt:
                await self._settle()
                continue
            if not self.queue:
                self._idle.set()
                self._wake_writer.clear()
                await self._wake_writer.wait()
                continue
            flush_s = self.options.journal_flush_ms / 1000.0
            if flush_s and self.queued_bytes < self.options.journal_flush_bytes:
                await asyncio.sleep(flush_s)
            taken, size = [], 0
            while self.queue and (not taken or (
                size + self.queue[0].nbytes <= self.options.max_journal_bytes
                and size < self.options.journal_flush_bytes
            )):
                group = self.queue.popleft()
                taken.append(group)
                size += group.nbytes
            self.queued_bytes -= size
            try:
                info = await call(self.inker.append, pack([g.records for g in taken]),
                                  [g.values for g in taken])
            except ObjectStoreError as exc:
                if exc.definite:
                    self._fail_groups(taken, exc)
                else:
                    self._doubt(taken, exc)
                continue
            except (FencedError, StoreClosedError, asyncio.CancelledError) as exc:
                self._stop_writes(taken, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            except Exception as exc:  # nothing was written: these groups fail, not the store
                self._fail_groups(taken, exc)
                continue
            self._durable(taken, info)

    def _durable(self, groups: list[Group], info) -> None:
        self.journal.extend([info])
        for group in groups:
            self._commit(group)
        self.counters["groups"] += 1

    def _fail_groups(self, failed: list[Group], exc: Exception) -> None:
        """A journal write failed for sure: its groups fail with ``exc``, and so do the queued
        groups that depend on them (see :func:`~.group_commit.split_queue`); the rest stay."""
        keep, dependent = split_queue(failed, self.queue)
        self.queue = deque(keep)
        self.queued_bytes = sum(g.nbytes for g in keep)
        self._fail(failed, exc)
        self._fail(dependent, ObjectStoreError(
            f"not written: it changes a key of an earlier write that failed ({exc})",
            definite=True))

    def _doubt(self, groups: list[Group], exc: ObjectStoreError) -> None:
        """A journal write's outcome is unknown: tell its callers so (``definite=False``), and
        keep its changes pending until the Inker has settled the slot."""
        self.counters["in_doubt_groups"] += len(groups)
        for group in groups:
            if not group.future.done():
                group.future.set_exception(exc)
        self.in_doubt = groups
        self._settled.clear()

    async def _settle(self) -> None:
        """Have the Inker settle the write in doubt, retrying while the store does not answer.
        Written: its changes become visible. Sealed: they never will, and the queued groups
        that depend on them fail. At close, give up after ``write_resolve_s``: the next
        writer's fence then seals the slot."""
        delays = RetryPolicy(backoff_s=0.05, max_backoff_s=2.0).delays()
        started = time.monotonic()
        groups = self.in_doubt
        while True:
            try:
                info = await call(self.inker.settle)
                break
            except ObjectStoreError as exc:
                if exc.definite:  # sealed: it was not written
                    info = None
                    break
                if self.closing and time.monotonic() - started > self.options.write_resolve_s:
                    self._stop_writes(groups, exc)
                    return
                await asyncio.sleep(next(delays))
            except BaseException as exc:
                self._stop_writes(groups, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
        self.in_doubt = []
        self._settled.set()
        if info is not None:
            self._durable(groups, info)
        else:
            self._fail_groups(groups, ObjectStoreError(
                "the write in doubt was sealed: it was not written", definite=True))

    def _fail(self, groups: list[Group], exc: BaseException) -> None:
        for group in groups:
            self._release_pending(group)
            if not group.future.done():
                group.future.set_exception(exc)

    def _stop_writes(self, taken: list[Group], exc: BaseException) -> None:
        """Fencing, close, or the loss of the Inker: nothing more can be written."""
        failed = taken + self.in_doubt + list(self.queue)
        self.queue.clear()
        self.queued_bytes = 0
        self.in_doubt = []
        self._settled.set()
        self._fail(failed, exc)
        if not isinstance(exc, asyncio.CancelledError):
            self.broken = self.broken or exc

    def _commit(self, group: Group) -> None:
        """A group is durable: make it visible, queue its Ledger changes, acknowledge it."""
        self._add_durable_rows(group.rows)
        self._append_unpushed(group.rows)
        if group.values.inline is not None:  # recent small writes stay readable from memory
            for sqn, value in zip(group.sqns, group.values.inline):
                if value is not None:
                    self.values.put(("v", sqn), value, len(value) + 64)
        self._release_pending(group)
        self.durable_sqn = max(self.durable_sqn, group.sqns[-1])
        self.counters["changes"] += len(group.sqns)
        if not group.future.done():
            group.future.set_result(list(group.sqns))

    def _release_pending(self, group: Group) -> None:
        """Forget the group's pending changes (unless a later change to the key is pending)."""
        pending, missing = self.pending, (None,)
        done = [k for k, sqn in zip(group.records[3], group.sqns)
                if pending.get(k, missing)[0] == sqn]
        for lkey in done:
            del pending[lkey]

    def _add_durable_rows(self, rows: LedgerRows) -> None:
        if not len(rows):
            return
        self.cache.update(rows.entries())
        self.cache_log.extend(zip(rows.sqn, rows.key))

    def _append_unpushed(self, rows: LedgerRows) -> None:
        for name in LedgerRows.__slots__:
            getattr(self.unpushed, name).extend(getattr(rows, name))
        if len(self.unpushed) >= self.options.push_keys:
            self._wake_pusher.set()

    # -- bulk writes (see leveled_ray.bulk.write) ----------------------------------------------

    def reserve_bulk(self) -> dict:
        """Reserve a window of SQNs for a bulk write, above every SQN given out so far."""
        self._check_usable()
        base = reserve_base(self.next_sqn - 1, self.reserved_upto)
        self.reserved_upto = base + WINDOW_SQNS
        return {"base": base, "indexed": self.indexed, "epoch": self.epoch}

    async def ingest(self, packed: bytes) -> int:
        """Install a bulk write's files: writes pause, every acknowledged change is persisted
        to the Ledger, then the Penciller installs the files in one manifest change. Returns
        the manifest version."""
        journal, ssts = unpack(packed)
        self._check_usable()
        async with self._ingest_lock:
            self._writes_open.clear()
            try:
                await self._idle.wait()  # every admitted change is durable
                self._check_usable()
                low = min(j.min_sqn for j in journal)
                if low < self.next_sqn:
                    raise IngestConflictError(
                        f"the store gave out SQN {self.next_sqn - 1} before the bulk write "
                        f"(from SQN {low}) was installed: another bulk write landed first")
                await self._push()
                files = await call(self.penciller.ingest, journal, ssts, self.durable_sqn)
                await call(self.inker.adopt, journal)
                self.journal.extend(journal)
                top = max(j.max_sqn for j in journal)
                self.next_sqn = max(self.next_sqn, top + 1)
                self.durable_sqn = max(self.durable_sqn, top)
                self.indexed = self.indexed or any(s.min_key < TAG_OBJECT for s in ssts)
                if files.version > self.files.version:
                    self._adopt(files)
                return files.version
            finally:
                self._writes_open.set()

    # -- keeping the Penciller up to date ------------------------------------------------------

    async def _push(self) -> None:
        async with self._push_lock:  # one push in flight keeps pushes in SQN order
            rows, upto = self.unpushed, self.durable_sqn
            self.unpushed = LedgerRows()
            batch = rows.to_batch()
            self.pushed.append((upto, batch))  # until persisted: what snapshots reference
            await call(self.penciller.push, batch, upto)

    async def _pusher(self) -> None:
        """Push recent Ledger changes to the Penciller: every ``push_keys`` or ``push_ms``.

        Never cancelled mid-push (a cancelled push would lose its changes while a later push
        moved the persisted SQN past them): ``close`` stops it by flag and waits for it.
        """
        while not self.closing:
            await wait_set(self._wake_pusher, self.options.push_ms / 1000.0)
            self._wake_pusher.clear()
            if len(self.unpushed):
                try:
                    await self._push()
                except Exception as exc:
                    # The changes stay in the Journal; stop here so no later push can move
                    # the persisted SQN past them. Reopening replays them.
                    self.broken = exc
                    return

    async def _watch_ledger(self) -> None:
        """Adopt each new set of Ledger files, and drop the cache entries they now hold."""
        while True:
            try:
                files = await call(self.penciller.wait_view, self.files.version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.broken = self.broken or exc
                return
            if files is not None:
                self._adopt(files)

    def _adopt(self, files: LedgerFiles) -> None:
        kept = {f.name for level in files.levels for f in level}
        removed = [f for level in self.files.levels for f in level if f.name not in kept]
        for info in removed:  # a committed manifest change removed them
            self.host.sst(info).retire(files.version)
        if removed:
            self._wake_reaper.set()
        if self.head_only and files.persisted_sqn > self.files.persisted_sqn:
            self._trim_journal()
        self.files = files
        while self.pushed and self.pushed[0][0] <= files.persisted_sqn:
            self.pushed.popleft()
        log, cache = self.cache_log, self.cache
        while log and log[0][0] <= files.persisted_sqn:
            sqn, lkey = log.popleft()
            entry = cache.get(lkey)
            if entry is not None and entry[0] == sqn:
                del cache[lkey]
        self._persisted.set()

    def _trim_journal(self) -> None:
        """head_only: ask the Inker to delete the journal files the Ledger now holds."""
        self.tasks.start(call(self.inker.compact), "journal trim")

    async def _watch_journal(self) -> None:
        """Adopt the journal files of each compaction, and retire the files it replaced."""
        while True:
            try:
                view = await call(self.inker.wait_journal, self.journal_version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.broken = self.broken or exc
                return
            if view is not None and view["version"] > self.journal_version:
                self._adopt_journal(view)

    def _adopt_journal(self, view: dict) -> None:
        removed = set(view["removed"])
        listed = {f.name for f in view["files"]}
        # Keep files appended since the Inker made the view; drop the ones it replaced.
        newer = [f for f in self.journal.files if f.name not in removed and f.name not in listed]
        retired = [f for f in self.journal.files if f.name in removed]
        self.journal = JournalIndex(list(view["files"]) + newer)
        self.journal_version = view["version"]
        for info in retired:
            self.host.journal(info).retire(view["version"])
        if retired:
            self._wake_reaper.set()

    async def _reaper(self) -> None:
        """Delete retired files once their owner allows it (leveled's delete_pending): poll
        the Penciller with backoff, one question per manifest version."""
        delay = 0.05
        while True:
            pending = self.host.pending_deletes()
            if not pending:
                self._wake_reaper.clear()
                await self._wake_reaper.wait()
                delay = 0.05
                continue
            progressed = False
            answers: dict[tuple[str, int], bool] = {}
            for clerk in pending:
                if self.host.readers_before(clerk.removed_in):
                    continue  # a read of an older view may still need it
                question = (clerk.kind, clerk.removed_in)  # SSTs: the Penciller; journal: Inker
                if question not in answers:
                    owner = self.penciller if clerk.kind == "sst" else self.inker
                    try:
                        answers[question] = await call(owner.may_delete, clerk.removed_in)
                    except Exception:
                        self.counters["reaper_failures"] += 1
                        answers[question] = False
                if answers[question]:
                    try:
                        await clerk.delete()
                    except ObjectStoreError:
                        self.counters["reaper_failures"] += 1
                        continue  # tried again next round; GC is the backstop
                    self.counters["files_deleted"] += 1
                    progressed = True
            delay = 0.05 if progressed else min(delay * 2, 2.0)
            await asyncio.sleep(delay)

    async def _gc_loop(self) -> None:
        """Garbage collection every ``gc_interval_s`` (the backstop for files no clerk will
        delete: a crashed writer's, unpublished uploads, old manifests)."""
        interval = self.options.gc_interval_s
        while interval > 0:
            await asyncio.sleep(interval)
            try:
                plan = await garbage_collection.collect(self.store, self.options)
                self.counters["gc_deleted"] += len(plan.paths)
            except Exception as exc:  # the next pass tries again
                self.counters["gc_failures"] += 1
                self.last_gc_error = repr(exc)

    # -- reads ---------------------------------------------------------------------------------

    async def _entry(self, lkey: bytes) -> tuple | None:
        # The cache and the view must be read together, with no await between: a change
        # leaves the cache in the same step as the view that holds it arrives.
        entry = self.cache.get(lkey)
        if entry is not None:
            return entry
        return await ledger_get(self.host, self.files, lkey)

    async def get(self, lkey: bytes) -> bytes | None:
        return (await self.get_many([lkey]))[0]

    async def head(self, lkey: bytes) -> Head | None:
        return (await self.head_many([lkey]))[0]

    async def get_many(self, lkeys: list[bytes]) -> list[bytes | None]:
        """Values of many keys: Ledger lookups first, then the values missing from the cache
        with one request per journal file."""
        self._check_readable()
        self.counters["gets"] += len(lkeys)
        with self.host.reading(self.journal_version):  # the values come from these files
            return await self._get_many(lkeys)

    async def _get_many(self, lkeys: list[bytes]) -> list[bytes | None]:
        entries = await self._entries(lkeys)
        now_s = time.time()
        sqns = [e[0] if is_live(e, now_s) else None for e in entries]
        values = {s: self.values.get(("v", s)) for s in sqns if s is not None}
        missing = [s for s, v in values.items() if v is None]
        if missing:
            self.counters["journal_reads"] += len(missing)
            for sqn, record in (await journal_fetch_many(self.host, self.journal,
                                                         missing)).items():
                values[sqn] = record.value
                self.values.put(("v", sqn), record.value, len(record.value) + 64)
            lost = [s for s in missing if values.get(s) is None]
            if lost:
                raise ObjectStoreError(f"the Journal has no value for SQNs {lost[:5]}",
                                       definite=True)
        return [None if s is None else values[s] for s in sqns]

    async def _entries(self, lkeys: list[bytes]) -> list[tuple | None]:
        """Ledger entries of many keys. The read registers the view it starts on, so no file
        of that view (or a later one) is deleted while it runs."""
        out: list[tuple | None] = []
        with self.host.reading(self.files.version):
            for i in range(0, len(lkeys), _GATHER):
                chunk = lkeys[i : i + _GATHER]
                out.extend(await asyncio.gather(*(self._entry(k) for k in chunk)))
        return out

    async def head_many(self, lkeys: list[bytes]) -> list[Head | None]:
        self._check_readable()
        self.counters["heads"] += len(lkeys)
        return [None if e is None else entry_to_head(*e) for e in await self._entries(lkeys)]

    async def current_sqns(self, lkeys: list[bytes]) -> list[int | None]:
        """The SQN each key's newest Ledger entry has (``None`` if the Ledger has none): what
        journal compaction asks to tell current entries from replaced ones."""
        return [None if e is None else e[0] for e in await self._entries(lkeys)]

    async def index_query(self, query: dict) -> list:
        """A bounded index query (``max_results`` set) answered here, in one round trip: on
        this process's view, pinned for the query, with the cached changes of the range."""
        self._check_readable()
        lo, hi = index_range(query["bucket"], query["field"], query["start"], query["end"],
                             query["start_key"], max_key_bytes=self.options.max_key_bytes)
        cached = LedgerRows.from_entries(
            (k, self.cache[k]) for k in self.cache.irange(lo, hi, inclusive=(True, False)))
        view = PointInTime(self.url, self.options, self.files, [], [cached.to_batch()],
                           self.durable_sqn, store=self.store, host=self.host)
        with self.host.reading(self.files.version):
            return [item async for batch in index_entries(view, **query) for item in batch]

    # -- snapshots ---------------------------------------------------------------------------

    async def snapshot(self, timeout_s: float, values: bool = True) -> dict:
        """Take a snapshot: this process's view of the store (Ledger files, journal files, and
        the batches of changes not yet in those files), registered with the Penciller (and the
        Inker, when ``values``) so that no file it reads is deleted before it is released or
        expires. Costs references to immutable batches, not a copy of anything."""
        self._check_readable()
        values = values and not self.head_only  # head_only values live in the Ledger
        files, journal, journal_version = self.files, self.journal.files, self.journal_version
        batches = [b for _, b in self.pushed]
        if len(self.unpushed):
            batches.append(self.unpushed.to_batch())
        view = PointInTime(self.url, self.options, files, journal, batches, self.durable_sqn,
                           store=self.store)
        snapshot_id = f"snap-{ulid()}"
        # Pin both versions here until the owners know the snapshot: the reaper must not delete
        # a file of this view in between.
        with self.host.reading(files.version), self.host.reading(journal_version):
            await call(self.penciller.register_snapshot, snapshot_id, timeout_s, files.version)
            if values:
                try:
                    await call(self.inker.register_snapshot, snapshot_id, timeout_s,
                               journal_version)
                except BaseException:
                    await call(self.penciller.release_snapshot, snapshot_id)
                    raise
        return {"id": snapshot_id, "view": view, "expires_at": time.time() + timeout_s,
                "values": values}

    async def release_snapshot(self, snapshot_id: str) -> None:
        """Release a snapshot: the files only it needed may now be deleted."""
        if self.closed:
            return
        await call(self.penciller.release_snapshot, snapshot_id)
        await call(self.inker.release_snapshot, snapshot_id)
        self._wake_reaper.set()

    # -- checkpoints ---------------------------------------------------------------------------

    async def checkpoint(self, lifetime: float | None, name: str | None,
                         source: str | None) -> Checkpoint:
        """A durable checkpoint holding every write acknowledged before the call: the Inker
        first records every journal file written so far in the manifest."""
        self._check_usable()
        if source is None:
            await call(self.inker.catalog)
        return await create_checkpoint(ManifestStore(self.store), lifetime, name, source)

    async def checkpoint_admin(self, op: str, *args):
        """``list``, ``refresh`` or ``delete`` a checkpoint (see
        :mod:`leveled_ray.admin.handle`)."""
        manifests = ManifestStore(self.store)
        if op == "list":
            return await list_checkpoints(manifests)
        if op == "refresh":
            return await refresh_checkpoint(manifests, *args)
        await delete_checkpoint(manifests, *args)
        self._wake_reaper.set()

    async def compact_journal(self) -> str:
        """Start a journal compaction now: ``"started"``, or ``"busy"`` if one is running.
        L0 memory is persisted first: compaction drops only entries the Ledger's files hold."""
        self._check_usable()
        if len(self.unpushed):
            await self._push()
        await call(self.penciller.persist)
        return await call(self.inker.compact)

    def _check_readable(self) -> None:
        if self.closed:
            raise StoreClosedError("the store is closed")
        if isinstance(self.broken, FencedError):
            self._check_usable()

    # -- admin ---------------------------------------------------------------------------------

    def get_options(self) -> Options:
        return self.options

    async def stats(self) -> dict:
        inker = await call(self.inker.stats) if self.inker else {}
        penciller = await call(self.penciller.stats) if self.penciller else {}
        pclerk = await call(self.pclerk.stats) if self.pclerk else {}
        iclerk = await call(self.iclerk.stats) if self.iclerk else {}
        return {
            "url": self.url,
            "name": self.name,
            "head_only": self.head_only,
            "epoch": self.epoch,
            "next_sqn": self.next_sqn,
            "durable_sqn": self.durable_sqn,
            "cache_keys": len(self.cache),
            "backlog": {"unpersisted": len(self.cache_log),
                        "limit": self.options.max_unpersisted_keys,
                        "l0_memory_keys": penciller.get("l0_memory_keys", 0),
                        "l0_files": penciller.get("l0_files", 0),
                        "throttled_writes": self.counters["throttled_writes"],
                        "throttle_ms": self.counters["throttle_ms"]},
            "pending_keys": len(self.pending),
            "queued_groups": len(self.queue),
            "unpushed_keys": len(self.unpushed),
            "ledger_files": self.files.file_count,
            "journal_files": len(self.journal),
            "file_cache": {"bytes": self.host.cache.used, "items": len(self.host.cache),
                           "hits": self.host.cache.hits, "misses": self.host.cache.misses},
            "value_cache": {"bytes": self.values.used, "items": len(self.values),
                            "hits": self.values.hits, "misses": self.values.misses},
            "clerks": self.host.states(),
            **self.counters,
            "io": self.store.stats.as_dict(),
            "process": process_stats(),
            "background_errors": self.tasks.errors,
            "last_error": self.tasks.last_error,
            "in_doubt": bool(self.in_doubt),
            "inker": inker,
            "penciller": penciller,
            "merges": pclerk,
            "compaction": iclerk,
            "state": "closed" if self.closed else ("broken" if self.broken else "open"),
        }

    async def close(self) -> None:
        """Finish queued writes, persist L0 memory and the journal catalog, stop the actors."""
        if self.closed:
            return
        self.closing = True
        self._persisted.set()  # writers held by backpressure see the close and give up
        await self._idle.wait()
        self._wake_pusher.set()
        if self._pusher_task is not None:
            await asyncio.gather(self._pusher_task, return_exceptions=True)
        if self.pclerk is not None:
            await call(self.pclerk.stop)
        await self.tasks.cancel(*self._loops)  # they hold no changes: the writer is idle
        try:
            if self.broken is None:
                await self._push()
                await call(self.penciller.close)
                await call(self.inker.close)
        finally:
            self.closed = True
            if not self.local:
                import ray

                for handle in (self.inker, self.penciller, self.pclerk, self.iclerk):
                    if handle is not None:
                        ray.kill(handle, no_restart=True)

    def actor_handles(self) -> list:
        return [] if self.local else [self.inker, self.penciller]


def make_actor():
    return as_actor(Bookie, max_concurrency=1000)


def check_put_size(changes: list[Change], options: Options) -> int:
    """The group's size in bytes; one group must fit in one journal file."""
    total = sum(c.size + len(c.lkey) for c in changes)
    if total > options.max_journal_bytes:
        raise InvalidArgumentError(
            f"put_many of {total} bytes is over max_journal_bytes={options.max_journal_bytes}: "
            "one group is one journal file; split it or raise the option"
        )
    return total
