"""Bulk writes: many rows built into store files in parallel, made visible in one step.

The Spark writer (:mod:`leveled_ray.spark`) uses this, and so can any other parallel job:

1. :func:`begin` (once, on the driver) reserves a window of SQNs above every SQN the store has
   given out: through the store's running Bookie, or from the manifest when no process has
   the store open. It returns a picklable :class:`BulkWrite`.
2. :func:`write_partition` (in each task) turns Arrow batches of ``bucket``, ``key``,
   ``value`` (and optional ``ttl``, ``indexes``) into journal files holding the values and
   Ledger SSTs holding the keys, using its partition's share of the window. Nothing is
   visible yet: no manifest names these files.
3. :func:`commit` (once, on the driver) installs every partition's files with one manifest
   change (:func:`leveled_ray.manifest.ingest.ingest`): all rows become visible at once.
   :func:`abort` deletes what the finished partitions wrote; files of failed tasks are
   orphans that garbage collection deletes.

Rows of a bulk write are newer than every write acknowledged before its commit. A key written
twice in one partition keeps its later row; written in two partitions, it keeps one of them
(which one is not defined).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..admin.checkpoints import create_checkpoint, release_checkpoint
from ..admin.gc import check_publishable, named_at, read_prepared, referenced
from ..client.bookies import connect_bookie
from ..client.shard_side import ShardSide
from ..client.store import Store
from ..codec import head_only, holds_index_entries, now_ms, put_change
from ..codec.index_terms import held_terms, resolve
from ..errors import InvalidArgumentError, LeveledError, StoreClosedError
from ..files import journal as jfmt
from ..files.clerk import write_sst
from ..files.framing import codec_id
from ..files.journal_slots import slot_info, tail_slots, write_fence
from ..files.names import compacted_journal_name
from ..files.sst import SstInfo
from ..files.store import ObjectStore
from ..files.sync import sync_twin
from ..manifest.ingest import IngestConflictError, ingest, partition_window, reserve_base, top_sqn
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore, Versioned
from ..manifest.transitions import bump_epoch, record_journal, require_usable
from ..options import Options
from ..read.store_reader import StoreReader
from .rows import change_rows, journal_slices, names, plain_rows, sorted_run

#: The columns a bulk write takes: required, then optional.
REQUIRED = ("bucket", "key", "value")
OPTIONAL = ("ttl", "indexes")
#: Bytes of values per journal file a partition writes.
JOURNAL_FILE_BYTES = 32 << 20
#: Raw bytes per journal block. Larger than the Inker's: bulk-written values are mostly read
#: in bulk (Spark reads, exports), where each block costs a fixed amount of work.
JOURNAL_BLOCK_BYTES = 256 << 10
#: Rows and bytes of values a partition sorts at a time into one run (bounding its memory).
RUN_KEYS = 1 << 20
RUN_BYTES = 256 << 20


@dataclass(frozen=True)
class BulkWrite:
    """One bulk write, as the driver began it (picklable: tasks receive it)."""

    url: str
    options: Options
    #: First SQN of the window reserved for this write.
    base: int
    #: Name of the running store to install through, or ``None`` (no process has it open).
    store_name: str | None
    #: Whether the store held index entries when the write began: then each row is resolved
    #: against the object's entry at ``checkpoint``, so index entries stay exact.
    indexed: bool
    checkpoint: str | None
    manifest_id: int | None
    #: The Ray cluster the running store is on (``None``: this process's, or ``RAY_ADDRESS``).
    ray_address: str | None = None


@dataclass(frozen=True)
class PartitionFiles:
    """What one partition wrote (its task's commit message)."""

    partition: int
    journal: tuple[jfmt.JournalInfo, ...]
    ssts: tuple[SstInfo, ...]
    rows: int

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.journal] + [f.name for f in self.ssts]


def check_columns(names) -> None:
    """Refuse a schema without ``bucket``, ``key`` and ``value``, or with other columns."""
    names = list(names)
    missing = [c for c in REQUIRED if c not in names]
    extra = [c for c in names if c not in REQUIRED + OPTIONAL]
    if missing or extra:
        raise InvalidArgumentError(
            f"a bulk write takes columns bucket, key, value and optionally ttl and indexes; "
            f"missing {missing}, unknown {extra}" + (
                " (sqn and last_modified are given by the store: select the other columns)"
                if {"sqn", "last_modified"} & set(extra) else ""))


# --- beginning ------------------------------------------------------------------------------


class WindowTaken(IngestConflictError):
    """The window asked for (``at``) is below the lowest one free: ``lowest``."""

    def __init__(self, lowest: int):
        super().__init__(f"the SQN window asked for is taken: the lowest free begins at {lowest}")
        self.lowest = lowest


async def begin_async(url: str, options: Options | None = None, *,
                      store_name: str | None = None,
                      ray_address: str | None = None, at: int | None = None) -> BulkWrite:
    """Reserve SQNs for a bulk write to the store at ``url``: through its running Bookie when
    ``store_name`` names one (on the Ray cluster at ``ray_address``), else from the
    manifest. ``at`` (through a running Bookie) asks for the window from that SQN, and raises
    :class:`WindowTaken` if it is below the lowest free one."""

    options = options or Options()
    store = ObjectStore.from_url(url, options)
    manifests = ManifestStore(store)
    latest = await manifests.latest()
    if latest is None and store_name is None:  # a new store, as lr.open would create it
        latest = await manifests.create_initial(Manifest.new())
    if latest is None:
        raise InvalidArgumentError(f"no store at {url}")
    require_usable(latest.manifest)
    if latest.manifest.setting(head_only.SETTING) is not None:
        raise InvalidArgumentError("bulk writes to a head_only store are not supported: write "
                                   "through its Store (put_many)")
    if store_name is not None:
        reserved = await ShardSide(await running_store(store_name, ray_address)).reserve_bulk(at)
        base, indexed = reserved["base"], reserved["indexed"]
        if base is None:
            raise WindowTaken(reserved["lowest"])
    else:
        tail = [await slot_info(store, s)
                for s in await tail_slots(store, latest.manifest.journal_next_slot)]
        if any(f.entries for f in tail):
            raise IngestConflictError(
                f"the store at {url} has journal files its manifest does not list yet: a "
                f"process has it open (give its store name), or it was not closed cleanly "
                f"(open it once)")
        base = reserve_base(top_sqn(latest.manifest))
        indexed = holds_index_entries(f.min_key for f in latest.manifest.sst_files())
    checkpoint = manifest_id = None
    if indexed:  # rows are resolved against this view (see write_partition)
        pin = await create_checkpoint(manifests, options.gc.min_age_s / 2, name="bulk-write")
        checkpoint, manifest_id = pin.id, pin.manifest_id
    return BulkWrite(url, options, base, store_name, indexed, checkpoint, manifest_id,
                     ray_address)


begin = sync_twin(begin_async)


# --- writing one partition -----------------------------------------------------------------


class PartitionWriter:
    """Builds one partition's files. Rows collect into a run (see :mod:`leveled_ray.bulk.rows`)
    of at most :data:`RUN_KEYS` rows and :data:`RUN_BYTES` of values; each run is sorted by
    key, given SQNs in that order, and written as journal files of the values and SSTs of
    the keys."""

    def __init__(self, plan: BulkWrite, partition: int):
        self.plan = plan
        self.partition = partition
        window = partition_window(plan.base, partition)
        self.next_sqn, self.end_sqn = window.start, window.stop
        self.store = ObjectStore.from_url(plan.url, plan.options)
        self.codec = codec_id(plan.options.compression)
        self.run: list[pa.Table] = []
        self.run_rows = self.run_bytes = 0
        self.journal: list[jfmt.JournalInfo] = []
        self.ssts: list[SstInfo] = []
        self.count = 0
        self.view = None
        self.now_s = time.time()
        self.lm = now_ms()

    async def add(self, batch: pa.RecordBatch) -> None:
        check_columns(batch.schema.names)
        rows = None
        if not self.plan.indexed:
            rows = await asyncio.to_thread(plain_rows, batch, self.plan.options, self.now_s)
        if rows is None:
            rows = change_rows(await self._changes(batch))
        self.run.append(rows)
        self.run_rows += rows.num_rows
        self.run_bytes += pc.sum(pc.binary_length(rows.column("value"))).as_py() or 0
        self.count += rows.num_rows
        if self.run_rows >= RUN_KEYS or self.run_bytes >= RUN_BYTES:
            await self._write_run()

    async def _changes(self, batch: pa.RecordBatch) -> list:
        """The rows checked one by one (as ``put_many`` checks them), index terms resolved."""
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        cols["bucket"], cols["key"] = names(batch.column("bucket")), names(batch.column("key"))
        n = batch.num_rows
        ttls = cols.get("ttl") or [None] * n
        indexes = cols.get("indexes") or [None] * n
        changes = []
        for bucket, key, value, ttl, terms in zip(cols["bucket"], cols["key"], cols["value"],
                                                  ttls, indexes):
            if isinstance(value, str):
                value = value.encode()
            adds = None if terms is None else [("add", *_term(t)) for t in terms]
            change, value = put_change(bucket, key, value, self.plan.options, self.now_s,
                                       indexes=adds, ttl=ttl)
            changes.append((change, value, terms is not None))
        if self.plan.indexed or any(t is not None for t in indexes):
            changes = await self._resolve(changes)
        return [(change, value) for change, value, _ in changes]

    async def _resolve(self, changes: list) -> list:
        """Make each row's index entries exact against the object's entry when the write
        began: a row with an ``indexes`` list holds exactly those terms afterwards (the
        others are removed); a row without one keeps the terms the object held."""
        current: dict[bytes, tuple | None] = {}
        if self.plan.indexed:
            view = await self._view()
            lkeys = [c.lkey for c, _, _ in changes]
            current = dict(zip(lkeys, await view.entries(lkeys)))
        out = []
        for change, value, given in changes:
            entry = current.get(change.lkey)
            if given:  # the list is the object's whole set of terms: remove the others
                wanted = {(f, t) for _, f, t in change.indexes}
                removes = tuple((1, f, t) for f, t in sorted(held_terms(entry, self.now_s)
                                                             - wanted))
                change = change._replace(indexes=change.indexes + removes)
            out.append((resolve(change, entry, self.now_s), value, given))
        return out

    async def _view(self):
        if self.view is None:

            self.view = await StoreReader.open(self.store, self.plan.options,
                                               manifest_id=self.plan.manifest_id)
        return self.view

    async def _write_run(self) -> None:
        if not self.run_rows:
            return
        run = pa.concat_tables(self.run)
        first = self.next_sqn
        if first + run.num_rows > self.end_sqn:
            raise IngestConflictError("a partition of a bulk write holds more rows than "
                                      "its SQN window: repartition the data")
        self.next_sqn += run.num_rows
        self.run, self.run_rows, self.run_bytes = [], 0, 0
        journal, ledger = await asyncio.to_thread(sorted_run, run, first, self.lm)
        for part in journal_slices(journal, JOURNAL_FILE_BYTES):
            name = compacted_journal_name()
            data, info = await asyncio.to_thread(jfmt.build_journal, name, 0, jfmt.NO_SLOT,
                                                 part, codec=self.codec,
                                                 block_bytes=JOURNAL_BLOCK_BYTES)
            await self.store.put_if_absent_async(name, data, unique=True)
            self.journal.append(info)
        step = self.plan.options.ledger.sst_max_keys
        for start in range(0, ledger.num_rows, step):
            self.ssts.append(await write_sst(self.store, ledger.slice(start, step),
                                             self.plan.options))

    async def finish(self) -> PartitionFiles:
        await self._write_run()
        return PartitionFiles(self.partition, tuple(self.journal), tuple(self.ssts),
                              self.count)


def _term(term: dict | tuple) -> tuple:
    """``(field, term)`` from an ``indexes`` element: a struct of ``field`` and ``term_bin``
    or ``term_int`` (the read side's shape), or a ``(field, term)`` pair."""
    if isinstance(term, dict):
        value = term.get("term_bin")
        if value is None:
            value = term.get("term_int")
        return term.get("field"), value
    if isinstance(term, (tuple, list)) and len(term) == 2:
        return tuple(term)
    raise InvalidArgumentError(f"an indexes element must be a struct of field and "
                               f"term_bin/term_int, not {term!r}")


async def write_partition_async(plan: BulkWrite, partition: int, batches) -> PartitionFiles:
    """Write one partition's rows (an iterable of Arrow batches) as store files."""
    writer = PartitionWriter(plan, partition)
    for batch in batches:
        if batch.num_rows:
            await writer.add(batch)
    return await writer.finish()


write_partition = sync_twin(write_partition_async)


# --- committing -----------------------------------------------------------------------------

def gather_files(parts) -> tuple[tuple, tuple]:
    """The journal files and SSTs of finished partitions."""
    journal = tuple(j for p in parts for j in p.journal)
    ssts = tuple(s for p in parts for s in p.ssts)
    return journal, ssts


async def commit_async(plan: BulkWrite, parts, mark: tuple[str, int] | None = None) -> int:
    """Install every partition's files at once; returns the rows written.

    Through the running Bookie when the write began with one; otherwise this claims the
    store as a new writer would (a Bookie that is still running on it is fenced) and
    installs the files with the manifest's CAS loop. ``mark`` (a streaming write's
    ``(writer, batch id)``) makes a batch sent again change nothing (its files are then
    orphans, which GC removes)."""
    parts = [p for p in parts if p is not None]
    journal, ssts = gather_files(parts)
    commit_began(plan)
    try:
        if journal:
            check_publishable(named_at(f.name for f in journal + ssts), plan.options,
                              time.time())
            if plan.store_name is not None:
                running = await running_store(plan.store_name, plan.ray_address, began=True)
                await ShardSide(running).ingest(journal, ssts, mark)
            else:
                await install_offline(plan.url, plan.options, journal, ssts, mark)
    finally:
        await release_pin(plan)
    return sum(p.rows for p in parts)


async def install_offline(url: str, options: Options, journal, ssts,
                          mark: tuple[str, int] | None = None) -> None:
    """Install files in a store no process has open: claim it as a new writer would (a
    Bookie still running on it is fenced), then one manifest change. Files it lists already
    change nothing."""
    store = ObjectStore.from_url(url, options)
    manifests = ManifestStore(store)
    mid, m = await manifests.update(bump_epoch)
    epoch = m.writer_epoch
    fence, tail = await write_fence(store, epoch, m.journal_next_slot)
    found = tuple(tail) + (fence,)
    await manifests.update(
        lambda m: ingest(record_journal(m, found, fence.slot + 1), epoch, journal, ssts, mark),
        Versioned(mid, m))


commit = sync_twin(commit_async)


#: The writes whose commit began in this process (compared by value: a copy of a plan is the
#: same write).
_COMMITS_BEGUN: weakref.WeakSet = weakref.WeakSet()


def commit_began(plan) -> None:
    """Note that ``plan``'s commit began: its abort then deletes nothing."""
    _COMMITS_BEGUN.add(plan)


def committing(plan) -> bool:
    """Whether ``plan``'s commit began in this process. Its install may still land after the
    commit raised (a manifest write that arrives late, a Bookie that finishes it), so no
    check of the store proves its files unused: garbage collection removes them once they
    are older than the publish window and named by nothing."""
    return plan in _COMMITS_BEGUN


async def abort_async(plan: BulkWrite, parts) -> None:
    """Give up: delete what the finished partitions wrote that no manifest or prepared part
    names (the rest is GC's). Spark calls this after a commit that raised too: then the
    commit's install may still land, so nothing is deleted (see :func:`committing`)."""
    store = ObjectStore.from_url(plan.url, plan.options)
    names = [n for p in parts if p is not None for n in p.names]
    try:
        names = [] if committing(plan) else await unnamed(store, names)
        for i in range(0, len(names), 64):
            await asyncio.gather(*(store.delete_async(n) for n in names[i:i + 64]),
                                 return_exceptions=True)
    finally:
        await release_pin(plan)


async def unnamed(store: ObjectStore, names: list[str]) -> list[str]:
    """``names`` (one write's files in one store) if, proven, no prepared part and not the
    newest manifest names any of them; else ``[]`` (any doubt too). A store installs a
    write's files all at once, so one named file means the write went in. Parts are read
    first: a part deleted before the manifest is read was installed, so that manifest names
    its files."""
    if not names:
        return []
    doubts: list = []
    try:
        held = await read_prepared(store, doubts)
        latest = await ManifestStore(store).latest()
    except LeveledError:
        return []
    if doubts:
        return []
    listed = referenced(latest.manifest) if latest is not None else set()
    return [] if any(n in held or n in listed for n in names) else names


abort = sync_twin(abort_async)


async def release_pin(plan: BulkWrite) -> None:
    """Release the checkpoint the write resolved index terms against, if it took one."""
    if plan.checkpoint is not None:

        await release_checkpoint(ManifestStore(ObjectStore.from_url(plan.url, plan.options)),
                                 plan.checkpoint)


async def connect_running(store_name: str, ray_address: str | None) -> Store:
    """A handle on the Bookie running as ``store_name`` (``InvalidArgumentError`` if none
    does): the lookup by name, which the protocol simulation replaces with its own."""
    return await asyncio.to_thread(connect_bookie, store_name, address=ray_address)


async def running_store(store_name: str, ray_address: str | None, began: bool = False) -> Store:
    """The client's handle on the running store ``store_name``: its calls raise the client's
    typed errors. A Bookie that is gone raises ``StoreClosedError``, also when it is gone by
    the time a write that ``began`` with it commits (its name no longer resolves)."""
    try:
        return await connect_running(store_name, ray_address)
    except InvalidArgumentError:
        if not began:
            raise
        raise StoreClosedError(f"the store {store_name!r} this bulk write began with is no "
                               "longer running: open it again, and write again") from None
