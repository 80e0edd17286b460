"""Queries: folds over keys, heads and objects, secondary-index queries, buckets.

Every query reads one point in time (a :class:`~leveled_ray.read.point_in_time.PointInTime`):
one moment of the store, while writes go on. On a :class:`~leveled_ray.client.store.Store`
each query takes its own snapshot and releases it when the query ends: exhausted, broken out
of, or closed (leveled's breaking folds). Folds stream a range of blocks at a time (see
:mod:`leveled_ray.read.scan`) and hand out ``batch_size`` rows at a time, so memory stays
bounded however large the store is. Each fold has an Arrow form (``*_batches``) yielding
``pyarrow.RecordBatch``.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa

from ..codec import TAG_INDEX, decode_key, split_object_key
from ..codec.tictac import DEFAULT_SIZE, SegmentFilter, TicTacTree, check_size
from ..errors import InvalidArgumentError
from ..files.framing import size_cuts
from ..files.sync import run_sync, two_forms, with_sync_twins
from ..options import check_positive_int
from .changes import (
    Change,
    arrow_feed,
    check_range,
    check_shard_range,
    python_feed,
)
from .fold import aiterate, iterate
from .kept_trees import view_tree
from .key_ranges import check_term, index_prefix, index_range, next_bucket, object_range
from .point_in_time import PointInTime
from .query_results import heads_batch, keys_batch, objects_batch, python_heads, python_names
from .rebatch import rebatched
from .views import journal_values

if TYPE_CHECKING:
    from ..manifest.shard_map import ShardMap

ORDERS = ("key", "sqn")
#: Bytes of journal entries an SQN-order fold reads at a time (one ranged GET).
JOURNAL_SPAN_BYTES = 8 << 20
#: Bytes of values a batch of objects holds at most (beyond ``batch_size``, for large values).
BATCH_VALUE_BYTES = 64 << 20


def check_batch_size(batch_size) -> int:
    return check_positive_int("batch_size", batch_size)


async def fetch_values(view: PointInTime, sqns) -> pa.Array:
    """The values of live objects by SQN (repeats allowed), as one Arrow array in that order."""
    return await journal_values(view.host, view.journal, np.asarray(sqns, dtype=np.uint64))


# --- the queries, as async generators of Arrow batches ----------------------------------------


async def fold_rows(view: PointInTime, lo: bytes, hi: bytes, batch_size: int,
                    segments: SegmentFilter | None = None) -> AsyncIterator[pa.Table]:
    """Live Ledger rows in ``[lo, hi)`` (of ``segments`` only, if given), ``batch_size`` at
    a time (fewer only at the end)."""
    scanned = view.scan(lo, hi) if segments is None else view.scan(lo, hi, segments=segments)
    async with contextlib.aclosing(rebatched(scanned, batch_size)) as rows:
        async for table in rows:
            yield table


async def object_rows(view: PointInTime, lo: bytes, hi: bytes, batch_size: int,
                      order: str) -> AsyncIterator[tuple[pa.Table, pa.Array]]:
    """Live objects in ``[lo, hi)`` as ``(Ledger rows, values)``, ``batch_size`` at a time (or
    fewer, when their values pass :data:`BATCH_VALUE_BYTES`)."""
    if order == "sqn":  # a merged view gives its shards' objects one shard after another
        found = view.in_turn(lambda v: _objects_by_sqn(v, lo, hi, batch_size))
        async with contextlib.aclosing(found) as items:
            async for item in items:
                yield item
        return
    async with contextlib.aclosing(fold_rows(view, lo, hi, batch_size)) as rows:
        async for table in rows:
            for part in value_slices(table, BATCH_VALUE_BYTES):
                yield part, await view.values(part)


def value_slices(table: pa.Table, max_bytes: int) -> list[pa.Table]:
    """Ledger rows cut into slices whose values (the ``size`` column) hold less than
    ``max_bytes`` plus one object, so a batch of large objects stays bounded in memory."""
    sizes = table.column("size").to_numpy()
    if not len(sizes) or int(sizes.sum()) <= max_bytes:
        return [table]
    bounds = size_cuts(sizes, max_bytes) + [table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


async def live_sqns(view: PointInTime, lo: bytes, hi: bytes) -> np.ndarray:
    """The sorted SQNs of the live objects in ``[lo, hi)`` (up to ``view.sqn``). SQNs may be
    sparse (bulk writes use windows far apart), so they are kept as a sorted array."""
    found = []
    async with contextlib.aclosing(view.scan(lo, hi)) as tables:
        async for table in tables:
            sqns = table.column("sqn").to_numpy()
            found.append(sqns[sqns <= view.sqn])
    return np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.uint64)


async def _objects_by_sqn(view: PointInTime, lo: bytes, hi: bytes,
                          batch_size: int) -> AsyncIterator[tuple[pa.Table, pa.Array]]:
    """Objects in the order they were written. A key-order pass over the Ledger collects the
    SQNs of the live objects in range; then each journal file is read in file order, only
    the spans that hold those entries."""
    live = await live_sqns(view, lo, hi)
    for info in sorted(view.journal.files, key=lambda f: f.min_sqn):
        first, last = np.searchsorted(live, [info.min_sqn, info.max_sqn + 1])
        if first == last:
            continue
        clerk = view.host.journal(info)
        sqns = (await clerk.footer()).sqns
        wanted = np.flatnonzero(np.isin(sqns, live[first:last]))
        async for rows in clerk.row_spans(wanted, JOURNAL_SPAN_BYTES):
            for start in range(0, rows.num_rows, batch_size):
                chunk = rows.slice(start, batch_size)
                rows_out = pa.table({"key": chunk.column("lkey"), "sqn": chunk.column("sqn"),
                                     "last_modified": chunk.column("last_modified"),
                                     "extra": chunk.column("extra")})
                yield rows_out, chunk.column("value").combine_chunks()


async def index_entries(view: PointInTime, bucket, field: str, start, end, *,
                        return_terms: bool = False, term_regex=None, start_key=None,
                        max_results: int | None = None) -> AsyncIterator[list]:
    """Batches of index query results: keys, or ``(term, key)`` pairs, in (term, key) order."""
    lo, hi = index_range(bucket, field, start, end, start_key,
                         max_key_bytes=view.options.max_key_bytes)
    if start > end or max_results == 0:
        return
    plen = len(index_prefix(bucket, field))
    pattern = re.compile(term_regex) if isinstance(term_regex, str) else term_regex
    left = max_results
    async with contextlib.aclosing(view.scan(lo, hi)) as tables:
        async for table in tables:
            out = []
            for lkey in table.column("key").to_pylist():
                _, term, key = decode_key(TAG_INDEX + lkey[plen:])
                if pattern is not None and not pattern.search(term):
                    continue
                out.append((term, key) if return_terms else key)
                if left is not None and len(out) == left:
                    break
            if out:
                yield out
            if left is not None:
                left -= len(out)
                if left == 0:
                    return


def check_index_query(field: str, start, end, term_regex, max_results) -> None:
    check_term(field, start, "start")
    check_term(field, end, "end")
    if term_regex is not None:
        if not field.endswith("_bin"):
            raise InvalidArgumentError("term_regex applies to _bin fields only")
        if not isinstance(term_regex, (str, re.Pattern)):
            raise InvalidArgumentError("term_regex must be a str or a compiled re.Pattern")
        if isinstance(term_regex, str):
            try:
                re.compile(term_regex)
            except re.error as exc:
                raise InvalidArgumentError(f"term_regex is not a valid regex: {exc}") from None
    if max_results is not None and (not isinstance(max_results, int)
                                    or isinstance(max_results, bool) or max_results < 0):
        raise InvalidArgumentError(f"max_results must be an int >= 0, not {max_results!r}")


async def first_live_key(view: PointInTime, lo: bytes, hi: bytes) -> bytes | None:
    async with contextlib.aclosing(view.scan(lo, hi)) as tables:
        async for table in tables:
            return table.column("key")[0].as_py()
    return None


async def list_buckets(view: PointInTime) -> list:
    """Every bucket that holds a live object, in key order (one short scan per bucket)."""
    lo, hi = object_range()
    out = []
    while (lkey := await first_live_key(view, lo, hi)) is not None:
        bucket = split_object_key(lkey)[0]
        out.append(bucket)
        lo = next_bucket(bucket)
    return out


@with_sync_twins
class Queries:
    """Folds, index queries and bucket listing over the point in time :meth:`_query_view`
    gives. Subclasses provide ``_query_view`` (and may release something when a query ends)."""

    #: A sharded handle's shard map, whose positions (``{"0": sqn, ...}``) its change feed
    #: takes; ``None`` on a plain one, whose positions are SQNs.
    shard_map: ShardMap | None = None

    def _query_view(self, needs_values: bool) -> tuple[PointInTime, Callable | None]:
        """``(view, on_close)``: the point in time to read, and what to call when done.
        By default the ``_view_async`` of :class:`~leveled_ray.read.point_in_time.KeyReads`."""
        return run_sync(self._query_view_async(needs_values))

    async def _query_view_async(self, needs_values: bool):
        return await self._view_async(needs_values), None

    def _check_fold(self, kind: str) -> None:
        """Refuse folds the store cannot answer (a ``head_only`` store keeps no values)."""

    # -- describing a query: (needs_values, flatten, async generator factory) --

    def _rows_query(self, kind, bucket, start, end, batch_size, convert, segments=None):
        """A fold of live Ledger rows over an object range (of ``segments`` only, if given),
        each batch turned by ``convert(table, now_s)`` into what the caller gets (``now_s``:
        the view's clock when the query started)."""
        batch_size = check_batch_size(batch_size)
        self._check_fold(kind)

        def make(view):
            lo, hi = object_range(bucket, start, end, max_key_bytes=view.options.max_key_bytes)
            now_s = view.clock()

            async def gen():
                async with contextlib.aclosing(fold_rows(view, lo, hi, batch_size,
                                                         segments)) as rows:
                    async for table in rows:
                        yield convert(table, now_s)
            return gen()
        return make

    def _keys_query(self, bucket, start, end, batch_size, arrow, binary_names):
        def convert(table, _now_s):
            return (keys_batch(table, binary_names) if arrow
                    else list(zip(*python_names(table))))
        return False, not arrow, self._rows_query("keys", bucket, start, end, batch_size,
                                                  convert)

    def _heads_query(self, bucket, start, end, batch_size, arrow, binary_names, segments=None):
        def convert(table, now_s):
            return heads_batch(table, binary_names) if arrow else python_heads(table, now_s)
        return False, not arrow, self._rows_query("heads", bucket, start, end, batch_size,
                                                  convert, segments)

    def _objects_query(self, bucket, start, end, batch_size, arrow, binary_names, order,
                       with_indexes=False):
        batch_size = check_batch_size(batch_size)
        if order not in ORDERS:
            raise InvalidArgumentError(f"order must be one of {ORDERS}, not {order!r}")
        self._check_fold("objects")

        def make(view):
            lo, hi = object_range(bucket, start, end, max_key_bytes=view.options.max_key_bytes)

            async def gen():
                found = object_rows(view, lo, hi, batch_size, order)
                async with contextlib.aclosing(found) as it:
                    async for table, values in it:
                        if arrow:
                            yield objects_batch(table, values, binary_names, with_indexes)
                        else:
                            yield list(zip(*python_names(table), values.to_pylist()))
            return gen()
        return True, not arrow, make

    def _plan(self, query) -> QueryPlan:
        return QueryPlan(self, query)

    def _run(self, query) -> Iterator:
        needs_values, flatten, make = query
        view, on_close = self._query_view(needs_values)
        return iterate(lambda: make(view), flatten=flatten, on_close=on_close)

    def _run_async(self, query) -> AsyncIterator:
        needs_values, flatten, make = query

        async def gen():
            view, on_close = await self._query_view_async(needs_values)
            async with contextlib.aclosing(aiterate(lambda: make(view), flatten=flatten,
                                                    on_close=on_close)) as it:
                async for item in it:
                    yield item
        return gen()

    # -- folds --

    @two_forms(iterates=True)
    def fold_keys(self, bucket=None, start=None, end=None, *,
                  batch_size: int = 1000) -> Iterator[tuple]:
        """``(bucket, key)`` of every live object, in key order: all buckets, or one bucket
        with keys from ``start`` to ``end`` (both included; either may be ``None``). Cost: one
        pass over the Ledger files that overlap the range, block by block, merged with the
        view's changes not yet in a file; no value is read."""
        return self._plan(self._keys_query(bucket, start, end, batch_size, False, False))

    @two_forms(iterates=True)
    def fold_keys_batches(self, bucket=None, start=None, end=None, *, batch_size: int = 1000,
                          binary_names: bool = False) -> Iterator[pa.RecordBatch]:
        """:meth:`fold_keys` as Arrow batches with columns ``bucket`` and ``key`` (``string``;
        ``binary`` with ``binary_names=True``). Cost: :meth:`fold_keys`'s, without a Python
        object per row."""
        return self._plan(self._keys_query(bucket, start, end, batch_size, True, binary_names))

    @two_forms(iterates=True)
    def fold_heads(self, bucket=None, start=None, end=None, *,
                   batch_size: int = 1000) -> Iterator[tuple]:
        """``(bucket, key, Head)`` of every live object in the range, in key order. Cost: as
        :meth:`fold_keys`."""
        return self._plan(self._heads_query(bucket, start, end, batch_size, False, False))

    async def kept_tree_async(self, size: str = DEFAULT_SIZE) -> TicTacTree | None:
        """This point in time's tictac tree of ``size`` (see :mod:`leveled_ray.codec.tictac`)
        from a tree the store kept, without a fold: ``None`` where there is none it may use
        (trees off or being rebuilt, objects with a TTL, a larger ``size`` than kept), and a
        compare folds instead. Cost: a read of the saved tree, and lookups of the keys changed
        since it was saved."""
        check_size(size)
        view, on_close = await self._query_view_async(False)
        try:
            return await view_tree(view, size)
        finally:
            if on_close is not None and inspect.isawaitable(closed := on_close()):
                await closed

    @two_forms(iterates=True)
    def fold_heads_batches(self, bucket=None, start=None, end=None, *, batch_size: int = 1000,
                           binary_names: bool = False, segments=None,
                           tree_size: str = DEFAULT_SIZE) -> Iterator[pa.RecordBatch]:
        """:meth:`fold_heads` as Arrow batches (columns: see
        :data:`~leveled_ray.read.query_results.HEADS_SCHEMA`). ``segments`` (segment numbers
        of a tictac tree of ``tree_size``, see :mod:`leveled_ray.codec.tictac`) keeps only the
        objects whose keys fall in them. Cost: :meth:`fold_keys`'s, without a Python object
        per row; with ``segments``, only the blocks that may hold their keys are read (all
        blocks of files written before SST format 5)."""
        picked = None if segments is None else SegmentFilter(segments, tree_size)
        return self._plan(self._heads_query(bucket, start, end, batch_size, True, binary_names,
                                            picked))

    def _fold_entries_async(self, bucket=None, start=None, end=None, *, segments=None,
                            tree_size: str = DEFAULT_SIZE) -> AsyncIterator[pa.Table]:
        """What :meth:`fold_heads_batches` finds, as Ledger rows (``key`` the Ledger key, which
        keeps the names' types): what a compare folds (:mod:`leveled_ray.admin.compare`)."""
        picked = None if segments is None else SegmentFilter(segments, tree_size)
        return self._run_async((False, False, self._rows_query(
            "heads", bucket, start, end, 10_000, lambda table, _now_s: table, picked)))

    @two_forms(iterates=True)
    def fold_objects(self, bucket=None, start=None, end=None, *, order: str = "key",
                     batch_size: int = 1000) -> Iterator[tuple]:
        """``(bucket, key, value)`` of every live object in the range.

        ``order="key"`` reads the Ledger in key order and fetches each batch's values (one
        request per journal file involved). ``order="sqn"`` reads the Journal in file order,
        whole files at a time, and keeps the entries still current: objects come in the
        order they were written. Cost: :meth:`fold_keys`'s pass, plus for ``order="key"``
        one ranged read per journal file a batch's values are in, for ``order="sqn"`` a read
        of each journal file in the range.
        """
        return self._plan(self._objects_query(bucket, start, end, batch_size, False, False,
                                             order))

    @two_forms(iterates=True)
    def fold_objects_batches(self, bucket=None, start=None, end=None, *, order: str = "key",
                             batch_size: int = 1000, binary_names: bool = False,
                             with_indexes: bool = False) -> Iterator[pa.RecordBatch]:
        """:meth:`fold_objects` as Arrow batches with columns ``bucket``, ``key``, ``value``,
        ``sqn`` and ``last_modified`` (and ``indexes`` with ``with_indexes=True``). Cost:
        :meth:`fold_objects`'s, without a Python object per row."""
        return self._plan(self._objects_query(bucket, start, end, batch_size, True,
                                             binary_names, order, with_indexes))

    # -- the change feed --

    def _shard_labels(self) -> tuple[str, ...] | None:
        """The shards a position names (``None``: a plain store, whose position is an
        SQN)."""
        return None if self.shard_map is None else self.shard_map.labels

    def _changes_query(self, after, until, batch_size, arrow, binary_names, values):
        shards = self._shard_labels()
        ranges = (check_shard_range(after, until, shards) if shards is not None
                  else [check_range(after, until)])
        batch_size = check_batch_size(batch_size)

        def make(view):
            views = getattr(view, "views", [view])  # a merged view: each shard's in turn

            async def gen():
                for shard, (part, (lo, hi)) in enumerate(zip(views, ranges)):
                    tag = None if shards is None else shard
                    found = (arrow_feed(part, lo, hi, batch_size, values, tag, binary_names)
                             if arrow else python_feed(part, lo, hi, batch_size, values, tag))
                    async with contextlib.aclosing(found) as it:
                        async for batch in it:
                            yield batch
            return gen()
        return True, not arrow, make

    @two_forms(iterates=True)
    def changes(self, after: int = 0, until: int | None = None, *, values: bool = True,
                batch_size: int = 1000) -> Iterator[Change]:
        """Every change with ``after < sqn <= until`` (``until=None``: up to this point in
        time) as :class:`~leveled_ray.read.changes.Change` tuples, in SQN order: puts and
        deletes, with their metadata, index changes and (unless ``values=False``) values.
        On a sharded store ``after`` and ``until`` are positions ``{"0": sqn, ...}`` (or
        ``0`` for the start): each shard's changes come in its SQN order, shard after shard.

        Streams in bounded memory. Cost: a read of each journal file that holds the range,
        in order. Raises
        :class:`~leveled_ray.errors.HistoryUnavailableError` when journal compaction has
        dropped changes after ``after``."""
        return self._plan(self._changes_query(after, until, batch_size, False, False, values))

    @two_forms(iterates=True)
    def changes_batches(self, after: int = 0, until: int | None = None, *, values: bool = True,
                        batch_size: int = 1000,
                        binary_names: bool = False) -> Iterator[pa.RecordBatch]:
        """:meth:`changes` as Arrow batches (columns: see
        :data:`~leveled_ray.read.changes.CHANGES_SCHEMA`). Cost: :meth:`changes`'s, without a
        Python object per row."""
        return self._plan(self._changes_query(after, until, batch_size, True, binary_names,
                                             values))

    # -- secondary indexes --

    def _index_query(self, bucket, field, start, end, return_terms, term_regex, start_key,
                     max_results):
        check_index_query(field, start, end, term_regex, max_results)
        self._check_fold("index")

        def make(view):
            return index_entries(view, bucket, field, start, end, return_terms=return_terms,
                                 term_regex=term_regex, start_key=start_key,
                                 max_results=max_results)
        return False, True, make

    @two_forms(iterates=True)
    def index_query(self, bucket, field: str, start, end, *, return_terms: bool = False,
                    term_regex=None, start_key=None,
                    max_results: int | None = None) -> Iterator:
        """Keys of the objects whose ``field`` holds a term from ``start`` to ``end`` (both
        included), in (term, key) order; ``(term, key)`` pairs with ``return_terms=True``.

        ``_bin`` fields take ``str`` terms, ``_int`` fields ``int`` terms. ``term_regex``
        keeps terms that match it (Python ``re.search``; ``_bin`` fields). Paging:
        ``max_results`` stops after that many; to continue after a result ``(term, key)``,
        ask again with ``start=term, start_key=key``. Cost: one pass over the index entries
        in the term range (the Ledger keeps them in term order); ``max_results`` stops it
        early.
        """
        return self._plan(self._index_query(bucket, field, start, end, return_terms,
                                           term_regex, start_key, max_results))

    # -- buckets --

    async def list_buckets_async(self) -> list:
        """Every bucket holding a live object, in key order. Cost: one short scan per
        bucket."""
        async with contextlib.aclosing(self._run_async(
                (False, False, lambda view: _once(list_buckets(view))))) as it:
            async for result in it:
                return result

    async def is_empty_async(self) -> bool:
        """Whether the store holds no live object. Cost: one short scan."""
        lo, hi = object_range()
        async with contextlib.aclosing(self._run_async(
                (False, False, lambda view: _once(first_live_key(view, lo, hi))))) as it:
            async for result in it:
                return result is None


async def _once(coro) -> AsyncIterator:
    yield await coro


class QueryPlan(NamedTuple):
    """The plan of a query method (see :func:`~leveled_ray.files.sync.two_forms`): its
    synchronous form iterates on a private loop, a batch per step (:mod:`.fold`), its async
    form on the caller's loop."""

    handle: Queries
    query: tuple

    def run(self) -> Iterator:
        return self.handle._run(self.query)

    def run_async(self) -> AsyncIterator:
        return self.handle._run_async(self.query)

