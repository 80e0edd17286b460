"""The change feed: every change after a position, in SQN order, read from the Journal.

A *position* is an SQN: "every change after it". On a sharded store it is a dict from each
shard's number, as a string, to an SQN of that shard: ``{"0": 120, "1": 97, ...}`` (JSON as it
is, so Spark can keep it as an offset); every change then also says its ``shard``.

``changes(after, until)`` gives the puts and deletes with ``after < sqn <= until``, reading
the journal files of one point in time in SQN order, a span at a time (of a large file, or a
group of small ones), so memory stays bounded however long the history is. History before
the view's ``history_sqn`` may be gone (see :mod:`leveled_ray.manifest.history`): asking for
it raises :class:`~leveled_ray.errors.HistoryUnavailableError` before anything is read.

The rows are built column by column, with what a span's rows share worked out once per span;
only the ``extra`` column (metadata, head_only values) and non-empty index changes are
unpacked row by row.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Iterable
from typing import NamedTuple

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import OP_DELETE, OP_PUT, unpack_extra
from ..codec.entries import PACKED_EXTRA
from ..errors import InvalidArgumentError
from ..files.sync import gather_or_cancel
from ..manifest.history import check_covered, check_position
from ..manifest.shard_map import position_sqns
from .key_ranges import Names
from .rebatch import rebatched

#: Bytes of journal entries read at a time: a span of one file (one ranged GET), or a group
#: of small files (a GET each, all at once).
SPAN_BYTES = 8 << 20
#: Small journal files read at once into one span, at most.
FILES_AT_ONCE = 16
KINDS = {OP_PUT: "put", OP_DELETE: "delete"}
_INDEX_CHANGE = pa.struct([("change", pa.string()), ("field", pa.string()),
                           ("term_bin", pa.string()), ("term_int", pa.int64())])
CHANGES_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("key", pa.string()), ("sqn", pa.uint64()), ("kind", pa.string()),
    ("last_modified", pa.timestamp("ms", tz="UTC")), ("expires_at", pa.timestamp("s", tz="UTC")),
    ("metadata", pa.string()), ("indexes", pa.list_(_INDEX_CHANGE)), ("value", pa.binary()),
])


class Change(NamedTuple):
    """One change: a put (``value`` is the new value) or a delete (``value`` is ``None``).

    ``last_modified`` and ``expires_at`` are unix seconds (``expires_at``: ``None`` without a
    TTL); ``indexes`` are the change's index changes, ``("add" | "remove", field, term)``.
    ``value`` is also ``None`` when values were not asked for.
    """

    bucket: str | bytes
    key: str | bytes
    sqn: int
    kind: str
    value: bytes | None
    last_modified: float
    expires_at: float | None = None
    metadata: dict | None = None
    indexes: tuple = ()
    shard: int | None = None  # on a sharded store: the shard whose SQN this is


def changes_schema(binary_names: bool = False, sharded: bool = False) -> pa.Schema:
    schema = CHANGES_SCHEMA
    if binary_names:
        schema = schema.set(0, pa.field("bucket", pa.binary())).set(
            1, pa.field("key", pa.binary()))
    return schema.append(pa.field("shard", pa.int32())) if sharded else schema


def check_range(after, until) -> tuple[int, int | None]:
    check_position(after)
    if until is not None:
        check_position(until)
        if until < after:
            raise InvalidArgumentError(f"until ({until}) is before after ({after})")
    return after, until


def shard_positions(position, shards, name: str = "after") -> list[int] | None:
    """A sharded position as a list of SQNs by shard (``shards``: the count, or the shard
    map's labels): see :func:`~leveled_ray.manifest.shard_map.position_sqns`."""
    return position_sqns(position, shards, name)


def check_shard_range(after, until, shards) -> list[tuple[int, int | None]]:
    """``(after, until)`` of each shard (``shards``: the shard map's labels), checked."""
    afters = shard_positions(after, shards)
    untils = shard_positions(until, shards, "until") or [None] * len(afters)
    return [check_range(a, u) for a, u in zip(afters, untils)]


def advance(position: dict[str, int], changes, labels=None) -> dict[str, int]:
    """The sharded position after ``changes`` (each with its ``shard``: an index into
    ``labels``, the shard map's, by default ``"0"`` to ``"n-1"``) were read."""
    moved = dict(position)
    for change in changes:
        moved[str(change.shard) if labels is None else labels[change.shard]] = change.sqn
    return moved


def files_between(view, after: int, top: int) -> list:
    """The journal files of ``view`` holding changes in ``(after, top]``, in SQN order."""
    return [f for f in sorted(view.journal.files, key=lambda f: f.min_sqn)
            if f.entries and f.max_sqn > after and f.min_sqn <= top]


def file_groups(files: list, span_bytes: int = SPAN_BYTES,
                most: int = FILES_AT_ONCE) -> list[list]:
    """Consecutive journal files in groups read as one span: as many small files as fit in
    ``span_bytes`` together (``most`` at most); a larger file makes a group by itself."""
    groups: list[list] = []
    size = 0
    for info in files:
        if groups and len(groups[-1]) < most and size + info.size <= span_bytes:
            groups[-1].append(info)
            size += info.size
        else:
            groups.append([info])
            size = info.size
    return groups


async def journal_spans(view, after: int, until: int | None,
                        span_bytes: int = SPAN_BYTES) -> AsyncIterator[pa.Table]:
    """The journal rows of the puts and deletes of ``view`` with ``after < sqn <= until``
    (``None``: the view's SQN), in SQN order, about ``span_bytes`` at a time: a span of
    a large file, or the rows of several small ones, read at once (a bulk write or a flush
    makes a file of each batch: read one by one, each would cost a round trip, and work
    done once per table would be done for a few rows)."""
    check_covered(view.history_sqn, after)
    top = view.sqn if until is None else min(until, view.sqn)

    async def wanted(clerk) -> np.ndarray:
        sqns = (await clerk.footer()).sqns
        return np.flatnonzero((sqns > after) & (sqns <= top))

    def owned(info, rows: pa.Table) -> pa.Table:  # a split shard's inherited file: its own
        owns = view.files.foreign_owns(info)
        return rows if owns is None else rows.filter(owns.mask(rows.column("lkey").to_pylist()))

    async def file_rows(info) -> pa.Table | None:
        clerk = view.host.journal(info)
        if after < info.min_sqn and info.max_sqn <= top and not clerk.footer_at_hand():
            return owned(info, await clerk.whole())  # every entry is wanted: one GET
        rows = await wanted(clerk)
        return owned(info, await clerk.rows(rows)) if len(rows) else None

    for group in file_groups(files_between(view, after, top), span_bytes):
        if len(group) == 1 and group[0].size > span_bytes:  # a large file: a span at a time
            clerk = view.host.journal(group[0])
            spans = clerk.row_spans(await wanted(clerk), span_bytes)
            async with contextlib.aclosing(spans) as tables:
                async for table in tables:
                    yield _no_deltas(owned(group[0], table))
            continue
        found = [t for t in await gather_or_cancel(*map(file_rows, group)) if t is not None]
        if found:
            yield _no_deltas(pa.concat_tables(found))


def _no_deltas(rows: pa.Table) -> pa.Table:
    """The puts and deletes of journal rows (a filter copies every column: only if needed)."""
    ops = rows.column("op")
    if len(ops) and pc.max(ops).as_py() > OP_DELETE:
        return rows.filter(pc.less_equal(ops, OP_DELETE))
    return rows


async def journal_changes(view, after: int, until: int | None,
                          batch_size: int) -> AsyncIterator[pa.Table]:
    """:func:`journal_spans`, ``batch_size`` rows at a time (fewer only at the end), however
    many files they come from."""
    async with contextlib.aclosing(rebatched(journal_spans(view, after, until),
                                             batch_size)) as found:
        async for table in found:
            yield table


async def arrow_feed(view, after: int, until: int | None, batch_size: int, values: bool,
                     shard: int | None = None, binary_names: bool = False
                     ) -> AsyncIterator[pa.RecordBatch]:
    """:func:`journal_changes` as batches of :func:`changes_schema`."""
    async with contextlib.aclosing(journal_changes(view, after, until, batch_size)) as found:
        async for rows in found:
            yield changes_batch(rows, binary_names, values, shard)


async def python_feed(view, after: int, until: int | None, batch_size: int, values: bool,
                      shard: int | None = None,
                      span_bytes: int = SPAN_BYTES) -> AsyncIterator[Iterable[Change]]:
    """:func:`journal_spans` as :class:`Change` rows, ``batch_size`` at a time (fewer at the
    end of a span): what the rows of a span share is worked out once per span."""
    async with contextlib.aclosing(journal_spans(view, after, until, span_bytes)) as spans:
        async for span in spans:
            rows = FeedRows(span, values, shard)
            for lo in range(0, span.num_rows, batch_size):
                yield rows.changes(lo, batch_size)


def _extras(extras: pa.Array) -> tuple[list, list] | None:
    """``(metadata JSON, head_only values)`` per row, or ``None`` when no row packs more than
    its metadata (the column is then the metadata itself)."""
    if not pc.any(pc.starts_with(extras, pattern=PACKED_EXTRA)).as_py():
        return None
    unpacked = [unpack_extra(e) if e else (b"", (), None) for e in extras.to_pylist()]
    return [m for m, _, _ in unpacked], [v for _, _, v in unpacked]


def _index_changes(column: pa.Array) -> list:
    return [[] if raw is None else [{"change": "add" if op == 0 else "remove", "field": f,
                                     "term_bin": t if isinstance(t, str) else None,
                                     "term_int": t if isinstance(t, int) else None}
                                    for op, f, t in msgpack.unpackb(raw, raw=False)]
            for raw in column.to_pylist()]


def _no_index_changes(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                    pa.array([], _INDEX_CHANGE))


def changes_batch(rows: pa.Table, binary_names: bool, values: bool,
                  shard: int | None = None) -> pa.RecordBatch:
    """Journal rows as a batch of :data:`CHANGES_SCHEMA` (with a ``shard`` column when the
    rows are shard ``shard``'s)."""
    n = rows.num_rows
    col = {name: rows.column(name).combine_chunks() for name in rows.column_names}
    buckets, keys = Names(col["lkey"]).arrow(binary_names)
    kinds = pc.if_else(pc.equal(col["op"], OP_PUT), "put", "delete")
    expiry = col["expiry"].cast(pa.int64())
    expires = pc.if_else(pc.equal(expiry, 0), pa.scalar(None, pa.int64()), expiry)
    unpacked = _extras(col["extra"])
    if unpacked is None:
        extras = col["extra"]
        metadata = pc.if_else(pc.equal(pc.binary_length(extras), 0),
                              pa.scalar(None, pa.binary()), extras).cast(pa.string())
    else:
        metadata = pa.array([m.decode() if m else None for m in unpacked[0]], pa.string())
    indexes = (_no_index_changes(n) if col["indexes"].null_count == n
               else pa.array(_index_changes(col["indexes"]), pa.list_(_INDEX_CHANGE)))
    if not values:
        value = pa.nulls(n, pa.binary())
    elif unpacked is not None and any(v is not None for v in unpacked[1]):  # head_only
        value = pa.array(unpacked[1], pa.binary())
    else:
        value = col["value"]
    columns = [buckets, keys, col["sqn"], kinds,
               col["last_modified"].cast(pa.timestamp("ms", tz="UTC")),
               expires.cast(pa.timestamp("s", tz="UTC")), metadata, indexes, value]
    if shard is not None:
        columns.append(pa.array(np.full(n, shard, np.int32)))
    return pa.RecordBatch.from_arrays(columns,
                                      schema=changes_schema(binary_names, shard is not None))


class FeedRows:
    """Journal rows made :class:`Change` tuples a slice at a time, names as they were
    written (``str`` or ``bytes``), built column by column. What the slices share is worked
    out once: the names' decoding, and whether any row is a delete, expires, or has
    metadata or index changes (only then are those unpacked, row by row)."""

    def __init__(self, rows: pa.Table, values: bool, shard: int | None = None):
        self.rows, self.values, self.shard = rows, values, shard
        self.names = Names(rows.column("lkey").combine_chunks()).python_slices()
        self.all_puts = bool((rows.column("op").to_numpy() == OP_PUT).all())
        self.any_expiry = bool(rows.column("expiry").to_numpy().any())
        extras = rows.column("extra")
        self.plain = (rows.column("indexes").null_count == rows.num_rows
                      and not (len(extras) and pc.max(pc.binary_length(extras)).as_py()))

    def changes(self, lo: int, count: int) -> Iterable[Change]:
        """The rows ``lo:lo + count``.

        Each ``Change`` is made as it is asked for: a ``Change`` (unlike a plain tuple) stays
        tracked by the garbage collector, and a batch of them alive at once triggers
        collections that promote them and, in a process with a large heap, full
        collections (a seventh of the feed's time)."""
        rows = self.rows.slice(lo, count)
        n = rows.num_rows
        buckets, keys = self.names(lo, count)
        sqns = rows.column("sqn").to_numpy().tolist()
        kinds = (itertools.repeat("put") if self.all_puts
                 else list(map(KINDS.__getitem__, rows.column("op").to_numpy().tolist())))
        lms = (rows.column("last_modified").to_numpy() / 1000.0).tolist()
        expires = (itertools.repeat(None) if not self.any_expiry
                   else [float(e) if e else None
                         for e in rows.column("expiry").to_numpy().tolist()])
        vals = rows.column("value").to_pylist() if self.values else itertools.repeat(None, n)
        metadata, indexes = itertools.repeat(None), itertools.repeat(())
        if not self.plain:
            vals = list(vals)
            metadata, indexes = _unpacked(rows.column("extra").to_pylist(),
                                          rows.column("indexes").to_pylist(), vals,
                                          self.values)
        # Change._make without its Python frame: tuple.__new__(Change, row) for every row.
        return map(tuple.__new__, itertools.repeat(Change),
                   zip(buckets, keys, sqns, kinds, vals, lms, expires, metadata, indexes,
                       itertools.repeat(self.shard)))


def python_changes(rows: pa.Table, values: bool,
                   shard: int | None = None) -> Iterable[Change]:
    """Journal rows as :class:`Change` tuples (see :class:`FeedRows`)."""
    return FeedRows(rows, values, shard).changes(0, rows.num_rows)


def _unpacked(extras: list, index_changes: list, vals: list,
              values: bool) -> tuple[list, list]:
    """Each row's metadata and index changes; a head_only value packed in ``extra`` is put
    in ``vals``."""
    metadata, indexes = [None] * len(extras), [()] * len(extras)
    for i, (extra, idx) in enumerate(zip(extras, index_changes)):
        if extra:
            meta, _, packed_value = unpack_extra(extra)
            metadata[i] = json.loads(meta) if meta else None
            if values and vals[i] is None:
                vals[i] = packed_value
        if idx is not None:
            indexes[i] = tuple(("add" if o == 0 else "remove", f, t)
                               for o, f, t in msgpack.unpackb(idx, raw=False))
    return metadata, indexes
