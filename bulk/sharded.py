"""Bulk reads and writes of either layout: a plain store, or a sharded one (the Spark source
uses these; see :mod:`leveled_ray.bulk.read` and :mod:`leveled_ray.bulk.write`).

**Reads** of a sharded store pin one checkpoint of every shard at a consistent cut (through
the running store when it is named, else without Ray, which is refused while a shard is being
written), and split each shard's part on its own: a read has partitions per shard and per key
range within a shard. Each shard's part of a checkpoint the read made is released once that
shard's splits are read.

**Writes** route each row to its shard (:mod:`leveled_ray.codec.routing`): a task writes each
shard's rows as that shard's files. The commit is atomic across shards, the way a cross-shard
``put_many`` is (:mod:`leveled_ray.cluster.txn`):

1. **Prepare**: every shard with rows holds a part naming its files, ``txn/<id>.part`` in its
   store (through its running Bookie, or written here when no process has the store open).
   Garbage collection keeps the files a part names.
2. **Decide**: the commit record ``txn/<id>`` at the root, created if absent.
3. **Apply**: each shard installs its files with one manifest change, then deletes its part.

A driver that dies before step 2 leaves parts that are aborted (by their Bookie after
``txn_timeout_s``, or when the store is next opened, or by the next bulk write); after it,
parts that are installed the same ways. Consistent views (snapshots, checkpoints, readers, the
Spark reader) hold all of such a write or none of it. Point reads of two shards in the
instant between two shards' installs may see one first, as with any two writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..admin.checkpoints import create_checkpoint, release_checkpoint
from ..admin.gc import check_publishable, named_at
from ..client.shard_side import ShardSide
from ..cluster.admin import ShardedAdmin
from ..cluster.layout import shard_name
from ..codec.routing import shards_of
from ..entry_points import connect
from ..errors import (
    ConflictError,
    LeveledError,
    ObjectStoreError,
    StoreClosedError,
    WrongShardError,
)
from ..files.names import ulid, ulid_age
from ..files.store import NotFound, ObjectStore
from ..files.sync import sync_twin
from ..manifest.ingest import IngestConflictError
from ..manifest.shard_map import ShardMap, read_shard_map
from ..manifest.store import ManifestStore
from ..manifest.transitions import bump_epoch
from ..manifest.txn_records import (
    ABORT,
    COMMIT,
    STREAM_TXN,
    TXN_PREFIX,
    Part,
    claim_stream_batch,
    decide,
    decode_part,
    encode_part,
    part_name,
    record_name,
    txn_of_part,
)
from ..options import Options
from . import read as bulk_read
from . import write as bulk_write
from .rows import object_keys

# --- reads ----------------------------------------------------------------------------------


async def begin_reads_async(url: str, query: bulk_read.ReadQuery, options: Options | None = None,
                            *, checkpoint: str | None = None, lifetime: float = 600.0,
                            splits: int = 8, batch_size: int = bulk_read.BATCH_SIZE,
                            store_name: str | None = None, ray_address: str | None = None,
                            owns_checkpoint: bool = False) -> list[bulk_read.ReadPlan]:
    """The plans of one read of the store at ``url``: one for a plain store, one per shard
    for a sharded one (each split into about ``splits / shards`` ranges), all at one
    checkpoint. Without ``checkpoint`` the read makes its own (see :func:`pin_async`);
    ``owns_checkpoint`` makes the read release ``checkpoint`` once it is read, as its own."""
    options = options or Options()
    shard_map = await read_shard_map(ObjectStore.from_url(url, options))
    bulk_read.check_query(query)
    if shard_map is not None and checkpoint is not None:  # taken before a split: its layout
        shard_map = (await ShardedAdmin(url, shard_map, options)._layout_of_async(
            checkpoint)).shard_map
    made = checkpoint is None
    if made:
        checkpoint = await pin_async(url, options, lifetime, store_name=store_name,
                                     ray_address=ray_address, shard_map=shard_map)
    owns = made or owns_checkpoint
    try:
        if shard_map is None:
            return [await bulk_read.begin_read_async(url, query, options, checkpoint=checkpoint,
                                                     lifetime=lifetime, splits=splits,
                                                     batch_size=batch_size,
                                                     owns_checkpoint=owns)]
        each = max(1, math.ceil(splits / shard_map.count))
        return list(await asyncio.gather(*(bulk_read.begin_read_async(
            shard_map.shard_url(url, s), query, options, checkpoint=checkpoint,
            lifetime=lifetime, splits=each, batch_size=batch_size, owns_checkpoint=owns)
            for s in range(shard_map.count))))
    except BaseException:
        if made:
            with contextlib.suppress(LeveledError):
                await unpin_async(url, options, checkpoint, shard_map)
        raise


async def pin_async(url: str, options: Options, lifetime: float, *,
                    store_name: str | None = None, ray_address: str | None = None,
                    shard_map: ShardMap | None = None, name: str = "spark-read",
                    owner=None) -> str:
    """A checkpoint of the store at ``url`` for a read. Of a sharded store, at one cut of
    every shard: through the running store (``owner``, an open handle, or the one named
    ``store_name``: its cuts hold writes briefly), else without Ray (refused while a shard
    is written)."""
    if shard_map is None:
        shard_map = await read_shard_map(ObjectStore.from_url(url, options))
    if shard_map is None:  # a plain store's checkpoint needs no Ray, running or not
        return (await create_checkpoint(ManifestStore(ObjectStore.from_url(url, options)),
                                        lifetime, name=name)).id
    owner = owner or await sharded_handle(url, shard_map, options, store_name, ray_address)
    creating = (owner.checkpoint_async if hasattr(owner, "checkpoint_async")
                else owner.create_checkpoint_async)
    return (await creating(lifetime, name)).id


async def unpin_async(url: str, options: Options, checkpoint: str,
                      shard_map: ShardMap | None) -> None:
    """Release a read's checkpoint in every shard."""
    urls = [url] if shard_map is None else [shard_map.shard_url(url, s)
                                            for s in range(shard_map.count)]
    await asyncio.gather(*(release_checkpoint(ManifestStore(ObjectStore.from_url(u, options)),
                                              checkpoint) for u in urls))


begin_reads = sync_twin(begin_reads_async)


async def sharded_handle(url: str, shard_map: ShardMap, options: Options,
                         store_name: str | None = None, ray_address: str | None = None):
    """The running store ``store_name`` (its cuts hold writes briefly), or the store's admin
    (its checkpoints are refused while a shard is written)."""
    if store_name is None:
        return ShardedAdmin(url, shard_map, options)
    return await asyncio.to_thread(connect, store_name, address=ray_address)


# --- writes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardedBulkWrite:
    """One bulk write of a sharded store, as the driver began it: one
    :class:`~leveled_ray.bulk.write.BulkWrite` per shard (picklable: tasks receive it)."""

    url: str
    shard_map: ShardMap
    plans: tuple[bulk_write.BulkWrite, ...]
    options: Options

    @property
    def online(self) -> bool:
        return self.plans[0].store_name is not None


@dataclass(frozen=True)
class ShardedPartitionFiles:
    """What one partition wrote, by shard (``None``: no rows for that shard)."""

    partition: int
    parts: tuple[bulk_write.PartitionFiles | None, ...]

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts if p is not None)


async def begin_write_async(url: str, options: Options | None = None, *,
                            store_name: str | None = None, ray_address: str | None = None
                            ) -> bulk_write.BulkWrite | ShardedBulkWrite:
    """Begin a bulk write of the store at ``url``, of either layout (see
    :func:`leveled_ray.bulk.write.begin_async`; ``store_name`` names the running store, plain
    or sharded). A sharded store no process has open first settles the parts an earlier
    bulk write left (its driver died during its commit)."""
    options = options or Options()
    shard_map = await read_shard_map(ObjectStore.from_url(url, options))
    if shard_map is None:
        return await bulk_write.begin_async(url, options, store_name=store_name,
                                            ray_address=ray_address)
    if store_name is None:
        await settle_offline(url, shard_map, options)
    at = None  # through running shards: one base in every shard (see begin_shards)
    for _ in range(WINDOW_ATTEMPTS):
        try:
            return ShardedBulkWrite(url, shard_map, await begin_shards(
                url, shard_map, options, store_name, ray_address, at), options)
        except bulk_write.WindowTaken as taken:
            at = taken.lowest
    raise IngestConflictError("other bulk writes kept taking the SQN windows this one asked "
                              "for: nothing was written; begin it again")


#: Rounds a sharded bulk write's begin tries for one base free in every shard.
WINDOW_ATTEMPTS = 8


async def begin_shards(url: str, shard_map: ShardMap, options: Options, store_name, ray_address,
                       at: int | None) -> tuple[bulk_write.BulkWrite, ...]:
    """Each shard's part of a bulk write. Through running shards, every shard reserves the
    window from one base (the first shard's lowest, or ``at``): two writes' windows are then
    in the same order in every shard, so each shard keeps the same one's rows where they
    contend. A shard where that base is taken raises
    :class:`~leveled_ray.bulk.write.WindowTaken`, with its lowest free base to try next."""
    plans: list[bulk_write.BulkWrite] = []
    try:
        for s in range(shard_map.count):
            plans.append(await bulk_write.begin_async(
                shard_map.shard_url(url, s), options,
                store_name=None if store_name is None else shard_name(store_name,
                                                                    shard_map.prefixes[s]),
                ray_address=ray_address, at=at))
            if store_name is not None:
                at = plans[0].base
    except BaseException:
        await asyncio.gather(*(bulk_write.release_pin(p) for p in plans),
                             return_exceptions=True)
        raise
    return tuple(plans)


begin_write = sync_twin(begin_write_async)


async def write_partition_async(plan, partition: int, batches):
    """Write one partition's rows (Arrow batches) as store files: each row in its shard's."""
    if isinstance(plan, bulk_write.BulkWrite):
        return await bulk_write.write_partition_async(plan, partition, batches)
    writers: dict[int, bulk_write.PartitionWriter] = {}
    runs, route_by = list(plan.shard_map.runs), plan.shard_map.route_by
    for batch in batches:
        if not batch.num_rows:
            continue
        bulk_write.check_columns(batch.schema.names)
        shards = shards_of(await asyncio.to_thread(object_keys, batch, plan.options), runs,
                           route_by)
        for shard in np.unique(shards).tolist():
            if shard not in writers:
                writers[shard] = bulk_write.PartitionWriter(plan.plans[shard], partition)
            await writers[shard].add(batch.filter(pa.array(shards == shard)))
    parts = [await writers[s].finish() if s in writers else None
             for s in range(plan.shard_map.count)]
    return ShardedPartitionFiles(partition, tuple(parts))


write_partition = sync_twin(write_partition_async)


def shard_files(plan: ShardedBulkWrite, messages) -> dict[int, list]:
    """Each shard's finished partitions, for the shards that have rows."""
    out: dict[int, list] = {}
    for message in messages:
        if message is None:
            continue
        for shard, files in enumerate(message.parts):
            if files is not None and files.journal:
                out.setdefault(shard, []).append(files)
    return out


async def commit_async(plan, messages, mark: tuple[str, int] | None = None) -> int:
    """Install every partition's files at once, in every shard or none; returns the rows
    written (see the module's note). ``mark`` (a streaming write's ``(writer, batch id)``)
    makes a batch sent again change nothing: on a sharded store the batch is committed
    under its own claimed name (:func:`~leveled_ray.manifest.txn_records.claim_stream_batch`),
    so a batch an earlier attempt committed is found (this call returns once every shard
    installed it), and this attempt's files are left to garbage collection."""
    if isinstance(plan, bulk_write.BulkWrite):
        return await bulk_write.commit_async(plan, messages, mark)
    messages = [m for m in messages if m is not None]
    by_shard = shard_files(plan, messages)
    bulk_write.commit_began(plan)
    try:
        if mark is not None:
            txn, claimed = await claim_stream_batch(_root(plan), *mark)
            if not claimed:  # in: answer once every shard installed it
                await apply(plan, txn, list(range(plan.shard_map.count)))
                return 0
            await _commit_across(plan, txn, by_shard)
        elif len(by_shard) == 1:  # one shard: its own commit is atomic
            ((shard, parts),) = by_shard.items()
            await bulk_write.commit_async(plan.plans[shard], parts)
        elif by_shard:
            await _commit_across(plan, ulid(), by_shard)
    finally:
        await release_pins(plan)
    return sum(m.rows for m in messages)


async def _commit_across(plan: ShardedBulkWrite, txn: str, by_shard: dict[int, list]) -> None:
    """Prepare, decide and apply batch ``txn`` in the shards of ``by_shard`` (with none, only
    the decision is recorded)."""
    files = {s: bulk_write.gather_files(parts) for s, parts in by_shard.items()}
    written = [f.name for journal, ssts in files.values() for f in journal + ssts]
    check_publishable(named_at(written), plan.options, time.time())
    await prepare(plan, txn, files)
    # Decided within the publish window of the batch's name, or not at all: GC keeps an
    # aborted batch's record that long (cluster/admin.py), so a late commit finds it.
    late = ulid_age(txn.rsplit(".", 1)[-1], time.time())
    if late is not None and late > plan.options.gc.publish_window_s:
        await drop(plan, txn, list(files))
        raise ConflictError("not written, and nothing of it is visible: its commit took "
                            f"over {plan.options.gc.publish_window_s:g}s. Run it again")
    if await decide(_root(plan), txn, COMMIT) != COMMIT:
        await drop(plan, txn, list(files))
        raise ConflictError(
            "not written, and nothing of it is visible: a shard aborted the bulk write, as "
            f"its decision took over {plan.options.txn_timeout_s:g}s or a bulk write begun "
            "after it was installed first. Run it again")
    await apply(plan, txn, list(files))
    if not txn.startswith(STREAM_TXN):  # a stream's record says its batch is in
        with contextlib.suppress(ObjectStoreError):
            await _root(plan).delete_async(record_name(txn))  # else lr.gc(url) does


commit = sync_twin(commit_async)


async def release_pins(plan) -> None:
    """Release what a bulk write of either layout pinned when it began (each task of a
    streaming write begins its own)."""
    plans = [plan] if isinstance(plan, bulk_write.BulkWrite) else plan.plans
    await asyncio.gather(*(bulk_write.release_pin(p) for p in plans), return_exceptions=True)


def _root(plan: ShardedBulkWrite) -> ObjectStore:
    return ObjectStore.from_url(plan.url, plan.options)


def _shard_store(plan: ShardedBulkWrite, shard: int) -> ObjectStore:
    return ObjectStore.from_url(plan.shard_map.shard_url(plan.url, shard), plan.options)


async def _on_each(plan: ShardedBulkWrite, shards, call) -> list:
    """``await call(shard, handle)`` for every shard at once, where ``handle`` is the shard's
    running Bookie (online) or ``None``; returns each answer or error, in order. Handles are
    found one after another: joining Ray is not safe from several threads at once."""
    handles: dict = {}
    for shard in shards:
        p = plan.plans[shard]
        try:
            handles[shard] = None if not plan.online else await bulk_write.running_store(
                p.store_name, p.ray_address, began=True)
        except LeveledError as exc:
            handles[shard] = exc

    async def one(shard: int):
        if isinstance(handles[shard], Exception):
            raise handles[shard]
        return await call(shard, handles[shard])

    return await asyncio.gather(*(one(s) for s in shards), return_exceptions=True)


async def prepare(plan: ShardedBulkWrite, txn: str, files: dict[int, tuple]) -> None:
    """Step 1: every shard holds its part of ``txn``; if one cannot, the batch is aborted and
    its error raised."""

    async def one(shard: int, bookie) -> None:
        journal, ssts = files[shard]
        if bookie is not None:
            await ShardSide(bookie).prepare_ingest(txn, plan.url, journal, ssts)
        else:
            await _prepare_offline(plan, shard, txn, Part(plan.url, files=(tuple(journal),
                                                                          tuple(ssts))))

    failed = [a for a in await _on_each(plan, list(files), one) if isinstance(a, BaseException)]
    if failed:
        await decide(_root(plan), txn, ABORT)
        await drop(plan, txn, list(files))
        raise failed[0]


async def _prepare_offline(plan: ShardedBulkWrite, shard: int, txn: str, part: Part) -> None:
    """Leave the part in the shard, then claim the shard as a writer would: a split that
    claimed it before sees the part (it looks again after its claim, and is refused) or is
    fenced by this claim; one that retired it already makes this claim fail, and the batch
    is aborted (:class:`ConflictError`: the layout changed since the write began)."""
    store = _shard_store(plan, shard)
    await store.put_if_absent_async(part_name(txn), encode_part(part), unique=True)
    try:
        await ManifestStore(store).update(bump_epoch)
    except WrongShardError:
        raise ConflictError(f"not written, and nothing of it is visible: shard {shard} was "
                            "split since the bulk write began. Run it again") from None


async def drop(plan: ShardedBulkWrite, txn: str, shards: list[int]) -> None:
    """Drop the parts of an aborted ``txn`` (a shard that cannot be reached drops its own
    later; the files are garbage collection's)."""

    async def one(shard: int, bookie) -> None:
        if bookie is not None:
            await ShardSide(bookie).abort_part(txn)
        else:
            await _shard_store(plan, shard).delete_async(part_name(txn))

    await _on_each(plan, shards, one)


async def apply(plan: ShardedBulkWrite, txn: str, shards: list[int]) -> None:
    """Step 3: every shard installs its part of committed ``txn``."""

    async def one(shard: int, bookie) -> None:
        if bookie is not None:
            await ShardSide(bookie).commit_part(txn)
        else:
            await _apply_offline(plan.shard_map.shard_url(plan.url, shard), plan.options, txn)

    answers = await _on_each(plan, shards, one)
    failed = [(s, a) for s, a in zip(shards, answers) if isinstance(a, BaseException)]
    if failed:
        shard, error = failed[0]
        raise StoreClosedError(
            f"the bulk write is committed, but shard(s) {[s for s, _ in failed]} could not "
            f"install it yet ({error}); each installs it when it is next opened") from error


async def _apply_offline(url: str, options: Options, txn: str) -> None:
    """Install a committed part in a shard no process has open, then delete the part."""
    store = ObjectStore.from_url(url, options)
    try:
        part = decode_part(await store.get_async(part_name(txn)), part_name(txn))
    except NotFound:
        return  # installed and deleted already
    await bulk_write.install_offline(url, options, *part.files)
    await store.delete_async(part_name(txn))


async def settle_offline(url: str, shard_map: ShardMap, options: Options) -> int:
    """Settle the parts that bulk writes whose drivers died left in the shards of a store no
    process has open, from their records: installed if committed, dropped otherwise (an
    undecided one is aborted here). Returns how many were settled. A part of a
    ``put_many`` is left to the shard's Bookie, which settles it when the store is opened."""
    settled = 0
    root = ObjectStore.from_url(url, options)
    for s in range(shard_map.count):
        store = ObjectStore.from_url(shard_map.shard_url(url, s), options)
        for meta in await store.list_async(TXN_PREFIX):
            txn = txn_of_part(meta.path)
            if txn is None:
                continue
            try:
                part = decode_part(await store.get_async(meta.path), meta.path)
            except NotFound:
                continue
            if part.files is None:
                continue
            if await decide(root, txn, ABORT) == COMMIT:
                await _apply_offline(shard_map.shard_url(url, s), options, txn)
            else:
                await store.delete_async(meta.path)
            settled += 1
    return settled


async def abort_async(plan, messages) -> None:
    """Give up: delete what the finished partitions wrote, unless a commit of it began (see
    :func:`~leveled_ray.bulk.write.committing`)."""
    if isinstance(plan, bulk_write.BulkWrite):
        return await bulk_write.abort_async(plan, messages)
    if bulk_write.committing(plan):  # its parts may still be installed: GC's
        await release_pins(plan)
        return
    by_shard = shard_files(plan, messages)
    await asyncio.gather(*(bulk_write.abort_async(p, by_shard.get(s, []))
                           for s, p in enumerate(plan.plans)), return_exceptions=True)


abort = sync_twin(abort_async)
