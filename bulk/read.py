"""Reading a checkpoint of a store in parallel: the Spark reader and ``leveled-ray export``.

The driver pins a checkpoint (or takes one given), reads the manifest version it pins, and
splits the key range along SST boundaries into splits of about the same number of entries
(:func:`plan_splits`). Each task reads its split straight from the object store, through a
:class:`~leveled_ray.read.store_reader.StoreReader` at that version (no actor hop), as Arrow
batches.

A checkpoint the read pinned itself is released when the read finishes: each split, once
read, leaves a marker object, and the task that completes the set deletes the checkpoint
and the markers. A read that fails or is cancelled leaves it to expire after ``lifetime``
seconds; tasks renew it while they run, so a long read keeps its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from ..admin.checkpoint_lease import CheckpointLease
from ..admin.checkpoints import create_checkpoint, release_checkpoint
from ..codec import TAG_INDEX, LedgerRows, decode_key, object_key
from ..errors import CheckpointNotFoundError, InvalidArgumentError
from ..files.store import ObjectStore
from ..files.sync import sync_twin
from ..manifest import checkpoints as cp
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..options import Options, check_positive_int
from ..read.fold import iterate
from ..read.key_ranges import check_term, index_prefix, index_range, object_range
from ..read.queries import check_batch_size, fetch_values, object_rows
from ..read.query_results import objects_batch
from ..read.scan import scan
from ..read.store_reader import StoreReader

#: Where finished splits leave their markers: ``reads/<checkpoint id>/<split>``.
MARKER_PREFIX = "reads/"
#: Rows per Arrow batch, unless a read asks otherwise: large enough that the per-batch work,
#: in the task and in Spark, is small next to the per-row work (batches of large values are
#: cut at ``queries.BATCH_VALUE_BYTES``).
BATCH_SIZE = 65_536
#: The columns of a read, as Spark sees them (``sqn`` is signed there).
SPARK_TERM = "struct<field:string,term_bin:string,term_int:bigint>"


@dataclass(frozen=True)
class ReadQuery:
    """What a read selects: a bucket and key range, or the objects an index range finds."""

    bucket: str | bytes | None = None
    start: str | bytes | None = None
    end: str | bytes | None = None
    index: str | None = None
    term_start: str | int | None = None
    term_end: str | int | None = None
    with_indexes: bool = False
    binary_names: bool = False
    empty: bool = False  # filters that no row can pass

    def key_range(self, options: Options) -> tuple[bytes, bytes]:
        """The Ledger key range the query scans."""
        if self.index is None:
            return object_range(self.bucket, self.start, self.end,
                                max_key_bytes=options.max_key_bytes)
        if self.bucket is None:
            raise InvalidArgumentError("an index read needs a bucket")
        return index_range(self.bucket, self.index, self.term_start, self.term_end,
                           max_key_bytes=options.max_key_bytes)

    def arrow_schema(self) -> pa.Schema:
        name = pa.binary() if self.binary_names else pa.string()
        fields = [("bucket", name), ("key", name), ("value", pa.binary()), ("sqn", pa.int64()),
                  ("last_modified", pa.timestamp("us", tz="UTC"))]
        if self.with_indexes:
            fields.append(("indexes", pa.list_(pa.struct([
                ("field", pa.string()), ("term_bin", pa.string()), ("term_int", pa.int64())]))))
        if self.index is not None:
            fields.append(("term", pa.int64() if self.index.endswith("_int") else pa.string()))
        return pa.schema(fields)

    def spark_schema(self) -> str:
        name = "binary" if self.binary_names else "string"
        out = (f"bucket {name}, key {name}, value binary, sqn bigint, "
               f"last_modified timestamp")
        if self.with_indexes:
            out += f", indexes array<{SPARK_TERM}>"
        if self.index is not None:
            out += ", term " + ("bigint" if self.index.endswith("_int") else "string")
        return out


def check_query(query: ReadQuery) -> ReadQuery:
    """Refuse a malformed query before any task starts."""
    if query.index is not None:
        if query.bucket is None:
            raise InvalidArgumentError("an index read needs a bucket")
        check_term(query.index, query.term_start, "index_start")
        check_term(query.index, query.term_end, "index_end")
        if query.start is not None or query.end is not None:
            raise InvalidArgumentError("an index read takes a term range, not a key range")
    query.key_range(Options())
    return query


@dataclass(frozen=True)
class ReadSplit:
    index: int
    lo: bytes
    hi: bytes


@dataclass(frozen=True)
class ReadPlan:
    """One parallel read of one manifest version (picklable: tasks receive it)."""

    url: str
    options: Options
    query: ReadQuery
    checkpoint_id: str
    manifest_id: int
    #: Whether the read pinned the checkpoint itself (then it releases it when done).
    owns: bool
    lifetime: float
    splits: tuple[ReadSplit, ...] = field(default=())
    #: Ledger entries of the files the read covers (an upper bound of its rows, for progress).
    entries: int = 0
    #: Rows per Arrow batch a split yields.
    batch_size: int = BATCH_SIZE

    @property
    def marker_prefix(self) -> str:
        return f"{MARKER_PREFIX}{self.checkpoint_id}/"


def overlapping(manifest: Manifest, lo: bytes, hi: bytes) -> list:
    """The SSTs of every level that hold keys in ``[lo, hi)``."""
    return [f for f in manifest.sst_files() if f.min_key < hi and f.max_key >= lo]


def plan_splits(manifest: Manifest, lo: bytes, hi: bytes, target: int) -> list[tuple]:
    """``[lo, hi)`` cut at SST first keys into at most ``target`` ranges of about the same
    number of entries (the entries of the files that overlap it, all levels)."""
    files = sorted(overlapping(manifest, lo, hi), key=lambda f: f.min_key)
    total = sum(f.entries for f in files)
    cuts, seen = [], 0
    for f in files:
        # Cut before this file once the entries before it are past the middle of the next
        # split's share: the nearest SST boundary to each ideal cut.
        if lo < f.min_key < hi and (not cuts or f.min_key > cuts[-1]) and total and (
                len(cuts) + 1 < target and 2 * seen * target >= (2 * len(cuts) + 1) * total):
            cuts.append(f.min_key)
        seen += f.entries
    bounds = [lo] + cuts + [hi]
    return list(zip(bounds, bounds[1:]))


async def begin_read_async(url: str, query: ReadQuery, options: Options | None = None, *,
                           checkpoint: str | None = None, lifetime: float = 600.0,
                           splits: int = 8, batch_size: int = BATCH_SIZE,
                           owns_checkpoint: bool = False) -> ReadPlan:
    """Pin a checkpoint (or use ``checkpoint``) and split the read (see the module doc).
    ``owns_checkpoint``: the read releases ``checkpoint`` when it is done, as one it pinned
    itself (a sharded read's part of its own checkpoint)."""

    check_query(query)
    cp.check_lifetime(lifetime)
    check_positive_int("splits", splits)
    check_batch_size(batch_size)
    options = options or Options()
    manifests = ManifestStore(ObjectStore.from_url(url, options))
    latest = await manifests.latest()
    if latest is None:
        raise InvalidArgumentError(f"no store at {url}")
    if checkpoint is None:
        pin = await create_checkpoint(manifests, lifetime, name="spark-read")
    else:
        pin = cp.find(latest.manifest, checkpoint, time.time())
    manifest = await manifests.read_pinned(pin.manifest_id)
    lo, hi = query.key_range(options)
    ranges = [] if query.empty else plan_splits(manifest, lo, hi, splits)
    entries = sum(f.entries for f in overlapping(manifest, lo, hi))
    return ReadPlan(url, options, query, pin.id, pin.manifest_id,
                    checkpoint is None or owns_checkpoint, lifetime,
                    tuple(ReadSplit(i, a, b) for i, (a, b) in enumerate(ranges)), entries,
                    batch_size)


begin_read = sync_twin(begin_read_async)


# --- reading one split (in a task) ---------------------------------------------------------

_VIEWS: dict = {}
_VIEWS_LOCK = threading.Lock()
_LEASES: dict = {}  # (url, checkpoint id) -> CheckpointLease: this process renews reads' own
_MAX_VIEWS = 8


async def _view(plan: ReadPlan):
    """This process's reader of the plan's manifest version (tasks of one read share it)."""

    key = (plan.url, plan.manifest_id, plan.options)
    with _VIEWS_LOCK:
        view = _VIEWS.get(key)
    if view is None:
        view = await StoreReader.open(ObjectStore.from_url(plan.url, plan.options),
                                      plan.options, manifest_id=plan.manifest_id)
        with _VIEWS_LOCK:
            while len(_VIEWS) >= _MAX_VIEWS:
                _VIEWS.pop(next(iter(_VIEWS)))
            _VIEWS[key] = view
    return view


async def _check_pinned(plan: ReadPlan) -> None:
    """The checkpoint must still be live (its files may be gone otherwise); a read that owns
    it renews it (a :class:`CheckpointLease` per process)."""
    manifests = ManifestStore(ObjectStore.from_url(plan.url, plan.options))
    try:
        if plan.owns:
            lease = _LEASES.get((plan.url, plan.checkpoint_id))
            if lease is None:  # this process renews at its first split, then as it is due
                if len(_LEASES) > 1000:
                    _LEASES.clear()
                lease = _LEASES[(plan.url, plan.checkpoint_id)] = CheckpointLease(
                    manifests, plan.checkpoint_id, plan.lifetime, renewed_at=-plan.lifetime)
            await lease.keep()
        else:
            latest = await manifests.latest()
            cp.find(latest.manifest, plan.checkpoint_id, time.time())
    except CheckpointNotFoundError:
        raise CheckpointNotFoundError(
            f"checkpoint {plan.checkpoint_id} of this read is gone"
            + (": a read without a checkpoint option reads once and then releases its own; "
               "load() again, cache() the DataFrame, or pass checkpoint=<id> of one you keep"
               if plan.owns else " (deleted or expired)")) from None


async def split_batches(plan: ReadPlan, split: ReadSplit) -> AsyncIterator[pa.RecordBatch]:
    """The rows of one split, as Arrow batches of the query's :meth:`~ReadQuery.arrow_schema`,
    ``plan.batch_size`` rows at a time."""
    await _check_pinned(plan)
    batch_size = plan.batch_size
    view = await _view(plan)
    query = plan.query
    schema = query.arrow_schema()
    if query.index is None:
        rows = object_rows(view, split.lo, split.hi, batch_size, "key")
    else:
        rows = _index_rows(view, query, split, batch_size)
    async with contextlib.aclosing(rows) as found:
        async for item in found:
            table, values = item[0], item[1]
            batch = objects_batch(table, values, query.binary_names, query.with_indexes)
            columns = [batch.column(i) for i in range(batch.num_columns)]
            columns[3] = columns[3].cast(pa.int64())
            columns[4] = columns[4].cast(pa.timestamp("us", tz="UTC"))
            if query.index is not None:
                columns.append(pa.array(item[2], schema.field("term").type))
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
    await _finish(plan, split)


async def _index_rows(view, query: ReadQuery, split: ReadSplit, batch_size: int):
    """``(object rows, values, terms)`` of the live objects an index range finds."""
    plen = len(index_prefix(query.bucket, query.index))
    async with contextlib.aclosing(scan(view, split.lo, split.hi)) as tables:
        async for table in tables:
            for start in range(0, table.num_rows, batch_size):
                hits = [decode_key(TAG_INDEX + k[plen:])[1:] for k in
                        table.column("key").slice(start, batch_size).to_pylist()]
                lkeys = [object_key(query.bucket, key) for _, key in hits]
                entries = await view.entries(lkeys)
                live = [(lk, e, t) for lk, e, (t, _) in zip(lkeys, entries, hits) if e]
                if not live:
                    continue
                rows = LedgerRows.from_entries((lk, e) for lk, e, _ in live).to_batch()
                yield (pa.Table.from_batches([rows]),
                       await fetch_values(view, [e.sqn for _, e, _ in live]),
                       [t for _, _, t in live])


async def _finish(plan: ReadPlan, split: ReadSplit) -> None:
    """Leave this split's marker; the task that completes the set releases the checkpoint."""
    if not plan.owns:
        return

    store = ObjectStore.from_url(plan.url, plan.options)
    await store.put_if_absent_async(f"{plan.marker_prefix}{split.index:08d}", b"")
    done = await store.list_async(plan.marker_prefix)
    if len(done) < len(plan.splits):
        return
    await release_checkpoint(ManifestStore(store), plan.checkpoint_id)
    await asyncio.gather(*(store.delete_async(m.path) for m in done), return_exceptions=True)


def read_split(plan: ReadPlan, split: ReadSplit) -> Iterator:
    """Synchronous :func:`split_batches` (what a Spark task runs)."""
    return iterate(lambda: split_batches(plan, split), flatten=False)


async def release_async(plan: ReadPlan) -> None:
    """Release the read's own checkpoint now (when the caller knows the read is over)."""
    if plan.owns:

        await release_checkpoint(ManifestStore(ObjectStore.from_url(plan.url, plan.options)),
                                 plan.checkpoint_id)


release = sync_twin(release_async)
