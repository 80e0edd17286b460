"""Streaming reads of a store's changes, without Ray: what Spark Structured Streaming's
``leveled`` source and Ray Data's ``read_changes`` run (persist's ``snapshot`` + ``listen``).

A stream's **offset** is a JSON dict, the same for a plain and a sharded store::

    {"lease": "stream-<id>" | "", "checkpoint": "<id>" | "", "done": true | false,
     "sqn": {"0": <sqn>, "1": <sqn>, ...}}

``sqn`` is a position (a plain store has shard ``"0"`` only). The first offset names nothing
yet (Spark may ask for it more than once). The first batch's end names the stream's lease;
for a stream that starts with the store's contents (``done: false``) it also pins a
checkpoint at one cut, and that batch is the contents at the cut (one ``put`` row per live
object, read from the checkpoint). Every later batch is the changes between two positions,
read from the Journal. Ranges never change once named, so a batch read again (a restarted
query) gives the same rows.

The stream holds a history lease (``lease``) at its committed position on every shard, so
journal compaction keeps every change it has not read; :func:`commit` moves it (and deletes
the start checkpoint once its batch is committed). A stream nobody commits for ``lease_s``
seconds holds nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..admin import history_leases
from ..admin.checkpoints import list_checkpoints, release_checkpoint
from ..errors import InvalidArgumentError
from ..files.names import ulid
from ..files.store import ObjectStore
from ..manifest.shard_map import ShardMap, read_shard_map
from ..manifest.store import ManifestStore
from ..options import Options
from ..read.changes import arrow_feed, files_between, shard_positions
from ..read.fold import iterate
from ..read.store_reader import StoreReader
from . import read as bulk_read
from . import sharded as bulk

#: The rows of a stream: changes, and the contents a stream starts with (``put`` rows).
STREAM_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("key", pa.string()), ("shard", pa.int32()), ("sqn", pa.int64()),
    ("kind", pa.string()), ("last_modified", pa.timestamp("us", tz="UTC")),
    ("value", pa.binary()),
])
SPARK_SCHEMA = ("bucket string, key string, shard int, sqn bigint, kind string, "
                "last_modified timestamp, value binary")
#: Changes one task reads at most, and at least unless a shard's range has fewer: a batch's
#: range of a shard is cut into about ``splits`` parts between these sizes.
PART_CHANGES = 200_000
MIN_PART_CHANGES = 50_000
#: Rows per Arrow batch a task yields.
BATCH_ROWS = 16_384


@dataclass(frozen=True)
class Target:
    """A store as a stream reads it (picklable: tasks receive it)."""

    url: str
    options: Options
    shard_map: ShardMap | None

    @property
    def count(self) -> int:
        return 1 if self.shard_map is None else self.shard_map.count

    @property
    def labels(self) -> tuple[str, ...]:
        """The shards an offset names (a plain store's is ``"0"``)."""
        return ("0",) if self.shard_map is None else self.shard_map.labels

    def position(self, sqns) -> dict[str, int]:
        """An offset's ``sqn`` from each shard's SQN."""
        return {label: int(q) for label, q in zip(self.labels, sqns, strict=True)}

    def shard_store(self, shard: int) -> ObjectStore:
        url = self.url if self.shard_map is None else self.shard_map.shard_url(self.url, shard)
        return ObjectStore.from_url(url, self.options)


async def target_async(url: str, options: Options | None = None) -> Target:
    options = options or Options()
    root = ObjectStore.from_url(url, options)
    if await ManifestStore(root).latest() is None and await read_shard_map(root) is None:
        raise InvalidArgumentError(f"no store at {url}")
    return Target(url, options, await read_shard_map(root))


async def _newest(target: Target, shard: int) -> StoreReader:
    """The newest version of a shard, with its journal tail (every acknowledged change)."""
    return await StoreReader.open(target.shard_store(shard), target.options)


async def tops(target: Target) -> list[int]:
    """Each shard's newest SQN."""
    return [r.sqn for r in await asyncio.gather(*(_newest(target, s)
                                                  for s in range(target.count)))]


async def change_sqns(view, after: int, top: int) -> np.ndarray:
    """The SQNs of ``view``'s changes in ``(after, top]``, from its journal footers."""
    found = []
    for info in files_between(view, after, top):
        sqns = (await view.host.journal(info).footer()).sqns
        found.append(sqns[(sqns > after) & (sqns <= top)])
    return np.concatenate(found) if found else np.zeros(0, np.uint64)


# --- offsets ---------------------------------------------------------------------------------


def check_offset(offset: dict, target: Target) -> dict:
    if not isinstance(offset, dict) or set(offset) != {"lease", "checkpoint", "done", "sqn"}:
        raise InvalidArgumentError(f"not an offset of a leveled stream: {offset!r}")
    shard_positions(offset["sqn"], target.labels, "offset")
    return offset


async def start_async(target: Target, starting: str = "snapshot") -> dict:
    """A new stream's first offset, without side effects (Spark may ask more than once).
    ``starting``: ``"snapshot"`` (the contents at a cut, made when the first batch is
    planned, then every change after it), ``"latest"`` (changes from now on), or a position
    as JSON text (``"120"``, or ``{"0": 120, ...}`` on a sharded store)."""
    if starting in ("snapshot", "latest"):
        sqns = await tops(target)
    else:
        try:
            given = json.loads(starting)
        except ValueError:
            raise InvalidArgumentError(f"startingPosition must be snapshot, latest or a "
                                       f"position, not {starting!r}") from None
        if target.shard_map is None and isinstance(given, int):
            given = {"0": given}
        sqns = shard_positions(given, target.labels, "startingPosition")
    return {"lease": "", "checkpoint": "", "done": starting != "snapshot",
            "sqn": target.position(sqns)}


async def _pinned_sqn(target: Target, shard: int, checkpoint: str) -> int:
    """The newest SQN of a shard's part of ``checkpoint``."""
    store = target.shard_store(shard)
    found = {c.id: c for c in await list_checkpoints(ManifestStore(store))}
    if checkpoint not in found:
        raise InvalidArgumentError(f"checkpoint {checkpoint} of the stream is gone")
    view = await StoreReader.open(store, target.options,
                                  manifest_id=found[checkpoint].manifest_id)
    return view.sqn


async def hold(target: Target, offset: dict, lease_s: float) -> None:
    """Hold every change after the offset's position, on every shard, for ``lease_s``
    (nothing before the stream's first batch names its lease)."""
    if not offset["lease"]:
        return
    sqns = shard_positions(offset["sqn"], target.labels, "offset")
    await asyncio.gather(*(history_leases.set_lease(ManifestStore(target.shard_store(s)),
                                                    offset["lease"], sqn, lease_s)
                           for s, sqn in enumerate(sqns)))


async def latest_async(target: Target, start: dict, max_changes: int | None = None, *,
                       until: list[int] | None = None, lease_s: float = 3600.0,
                       checkpoint_s: float = 86_400.0, owner=None) -> dict:
    """The offset a batch from ``start`` ends at. A stream's first batch names its lease (and
    holds its start position), and a stream that starts with the contents pins its cut (the
    batch is then the contents). Later batches reach each shard's newest change, or
    (``max_changes``) about that many changes in all, and never pass ``until`` (each shard's
    newest SQN when an ``availableNow`` run began: a query that stops there ends)."""
    check_offset(start, target)
    if not start["lease"]:
        end = {**start, "lease": f"stream-{ulid()}", "done": True}
        if not start["done"]:
            end["checkpoint"] = await bulk.pin_async(
                target.url, target.options, checkpoint_s, shard_map=target.shard_map,
                name="stream-start", owner=owner)
            sqns = await asyncio.gather(*(_pinned_sqn(target, s, end["checkpoint"])
                                          for s in range(target.count)))
            end["sqn"] = target.position(sqns)
            await hold(target, end, lease_s)
            return end
        await hold(target, end, lease_s)
        start = end
    afters = shard_positions(start["sqn"], target.labels)
    views = await asyncio.gather(*(_newest(target, s) for s in range(target.count)))
    ends = [v.sqn for v in views]
    if until is not None:
        ends = [min(e, u) for e, u in zip(ends, until)]
    if max_changes is not None:
        share = max(1, max_changes // target.count)
        for s, (view, after) in enumerate(zip(views, afters)):
            sqns = await change_sqns(view, after, ends[s])
            ends[s] = int(sqns[min(share, len(sqns)) - 1]) if len(sqns) else after
    ends = [max(a, e) for a, e in zip(afters, ends)]
    return {**start, "checkpoint": "", "sqn": target.position(ends)}


# --- planning and reading a batch ------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """What one task reads: a split of the start contents, or a shard's changes in
    ``(lo, hi]``."""

    shard: int
    plan: bulk_read.ReadPlan | None = None
    split: bulk_read.ReadSplit | None = None
    lo: int = 0
    hi: int = 0


async def plan_async(target: Target, start: dict, end: dict, splits: int = 8) -> list[Part]:
    """The parts of the batch ``(start, end]``, about ``splits`` of them: the same for the
    same offsets."""
    check_offset(start, target)
    check_offset(end, target)
    if not start["done"] and end["done"]:
        plans = await bulk.begin_reads_async(target.url, bulk_read.ReadQuery(), target.options,
                                             checkpoint=end["checkpoint"], splits=splits)
        return [Part(s, plan, split) for s, plan in enumerate(plans) for split in plan.splits]
    parts = []
    afters = shard_positions(start["sqn"], target.labels)
    share = max(1, splits // target.count)
    for s, (lo, hi) in enumerate(zip(afters, shard_positions(end["sqn"], target.labels))):
        if hi <= lo:
            continue
        sqns = await change_sqns(await _newest(target, s), lo, hi)
        size = min(PART_CHANGES, max(MIN_PART_CHANGES, -(-len(sqns) // share)))
        cuts = [int(q) for q in sqns[size - 1:-1:size]]
        bounds = [lo, *cuts, hi]
        parts += [Part(s, lo=a, hi=b) for a, b in zip(bounds, bounds[1:])]
    return parts


async def read_async(target: Target, part: Part) -> AsyncIterator[pa.RecordBatch]:
    """The rows of one part, as batches of :data:`STREAM_SCHEMA`."""
    if part.plan is not None:
        async for batch in bulk_read.split_batches(part.plan, part.split):
            n = batch.num_rows
            yield pa.RecordBatch.from_arrays([
                batch.column("bucket"), batch.column("key"),
                pa.array(np.full(n, part.shard, np.int32)), batch.column("sqn"),
                pa.array(["put"] * n, pa.string()), batch.column("last_modified"),
                batch.column("value")], schema=STREAM_SCHEMA)
        return
    view = await _newest(target, part.shard)
    found = arrow_feed(view, part.lo, part.hi, BATCH_ROWS, True, part.shard)
    async with contextlib.aclosing(found) as batches:
        async for batch in batches:
            yield pa.RecordBatch.from_arrays([
                batch.column("bucket"), batch.column("key"), batch.column("shard"),
                batch.column("sqn").cast(pa.int64()), batch.column("kind"),
                batch.column("last_modified").cast(pa.timestamp("us", tz="UTC")),
                batch.column("value")], schema=STREAM_SCHEMA)


def read(target: Target, part: Part) -> Iterator[pa.RecordBatch]:
    """Synchronous :func:`read_async` (what a task runs)."""
    return iterate(lambda: read_async(target, part), flatten=False)


async def commit_async(target: Target, end: dict, lease_s: float) -> None:
    """A batch up to ``end`` is committed downstream: move the lease there, and let go of
    the start checkpoint once the contents batch is done."""
    check_offset(end, target)
    await hold(target, end, lease_s)
    if end["done"] and end["checkpoint"]:
        await asyncio.gather(*(release_checkpoint(ManifestStore(target.shard_store(s)),
                                                  end["checkpoint"])
                               for s in range(target.count)))


def lease_due(last: float | None, lease_s: float) -> bool:
    """Whether a stream's lease, last moved at ``last`` (monotonic), is due for renewal."""
    return last is None or time.monotonic() - last >= lease_s / 3
