"""Range scans of a point in time: the newest entry of every key in a range, streamed in order.

A scan merges sorted *sources*: the overlay (entries newer than the files), each L0 file, and
each deeper level (a run of files sorted by key range that do not overlap). Each source hands
out sorted Arrow tables of bounded size, read a range of whole blocks at a time with one read
ahead. The merge works window by window: a window ends at the smallest last key any source has
buffered, every source gives up its rows up to there, and one Arrow sort keeps the newest entry
of each key. Memory stays at about two reads per source however large the range is.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..codec import ACTIVE
from ..codec.tictac import SegmentFilter
from ..files.clerk import ClerkHost
from ..files.sst import SstInfo, block_span, sort_and_dedupe


class LedgerView(Protocol):
    """What a scan reads of a point in time (a
    :class:`~leveled_ray.read.point_in_time.PointInTime`, which calls the scan: so the scan
    names the parts it needs rather than that class)."""

    files: list
    host: ClerkHost
    sqn: int
    past: bool

    def clock(self) -> float: ...

    def overlay_table(self) -> tuple[list[bytes], pa.Table]: ...


#: Bytes of SST blocks one scan read fetches (one ranged GET), at most ...
READ_BYTES = 1 << 20
#: ... and at first: a source's reads double from this, so short queries read little.
FIRST_READ_BYTES = 32 << 10
#: Files of a run whose rows of a fold's tictac segments are read at once.
SEGMENT_FILES = 8
#: Rows of the overlay handed out at a time.
OVERLAY_ROWS = 16_384


class _Overlay:
    """The point in time's overlay, sliced to the range (and to the keys of ``segments``)."""

    def __init__(self, view: LedgerView, lo: bytes, hi: bytes,
                 segments: SegmentFilter | None = None):
        keys, table = view.overlay_table()
        start, stop = bisect.bisect_left(keys, lo), bisect.bisect_left(keys, hi)
        self._table = table.slice(start, stop - start)
        if segments is not None and self._table.num_rows:
            self._table = self._table.filter(segments.mask(keys[start:stop]))
        self._pos = 0

    async def next(self) -> pa.Table | None:
        if self._pos >= self._table.num_rows:
            return None
        part = self._table.slice(self._pos, OVERLAY_ROWS)
        self._pos += OVERLAY_ROWS
        return part

    async def close(self) -> None:
        pass


class _Run:
    """SSTs sorted by key range that do not overlap (one L0 file, or a whole deeper level),
    read a range of whole blocks at a time, with the next read in flight. Reads start at
    :data:`FIRST_READ_BYTES` and double up to :data:`READ_BYTES`, so a query that wants a few
    rows reads little and a long scan reads in large requests; a fold of tictac segments reads
    the blocks that may hold them, scattered, many to a request, and several files at once."""

    def __init__(self, host: ClerkHost, files: tuple[SstInfo, ...], lo: bytes, hi: bytes,
                 owns=lambda sst: None, segments: SegmentFilter | None = None):
        self._host = host
        self._owns = owns  # a split shard's run, for its inherited files
        self._segments = segments  # a fold of tictac segments reads only their blocks
        self._files = deque(f for f in files if f.max_key >= lo and f.min_key < hi)
        self._lo, self._hi = lo, hi
        self._file: list | None = None  # [clerk, footer, the blocks left to read, owns]
        self._read_bytes = FIRST_READ_BYTES
        self._ahead: asyncio.Future | None = None

    async def _read(self) -> pa.Table | None:
        if self._segments is not None:
            return await self._read_segments()
        while True:
            if self._file is None:
                if not self._files:
                    return None
                sst = self._files.popleft()
                clerk = self._host.sst(sst)
                footer = await clerk.footer()
                first, end = block_span(footer, self._lo, self._hi)
                if first < end:
                    self._file = [clerk, footer, deque(range(first, end)), self._owns(sst)]
                continue
            clerk, footer, blocks, owns = self._file
            first, stop = self._adjacent(footer, blocks)
            table = pa.Table.from_batches(await clerk.read_blocks(first, stop))
            if not blocks:
                self._file = None
            if table := self._kept(table, owns):
                return table

    async def _read_segments(self) -> pa.Table | None:
        """The rows of the fold's segments in the next :data:`SEGMENT_FILES` files, read at
        once: a fold of a few segments finds a few rows a file, so files read one by one
        would wait on one request after another, and hand the merge a window each."""
        while self._files:
            ssts = [self._files.popleft() for _ in range(min(SEGMENT_FILES, len(self._files)))]
            found = await asyncio.gather(*(
                self._host.sst(sst).segment_rows(self._segments, self._lo, self._hi, READ_BYTES)
                for sst in ssts))
            kept = (self._kept(table, self._owns(sst)) for sst, table in zip(ssts, found))
            if parts := [table for table in kept if table is not None]:
                return pa.concat_tables(parts)
        return None

    def _kept(self, table: pa.Table | None, owns) -> pa.Table | None:
        """The rows of ``table`` in the range (and the shard's, ``owns``), if any."""
        if table is None:
            return None
        table = clip(table, self._lo, self._hi)
        if owns is not None and table.num_rows:
            table = table.filter(owns.mask(table.column("key").to_pylist()))
        return table if table.num_rows else None

    def _adjacent(self, footer, blocks: deque) -> tuple[int, int]:
        """The next run of adjacent blocks to read in one request (``first``, ``end``), in
        requests that grow."""
        first = stop = blocks.popleft()
        stop += 1
        while (blocks and blocks[0] == stop
               and footer.offsets[stop + 1] - footer.offsets[first] <= self._read_bytes):
            stop = blocks.popleft() + 1
        self._read_bytes = min(2 * self._read_bytes, READ_BYTES)
        return first, stop

    async def next(self) -> pa.Table | None:
        ahead = self._ahead if self._ahead is not None else asyncio.ensure_future(self._read())
        table = await ahead
        self._ahead = asyncio.ensure_future(self._read()) if table is not None else None
        return table

    async def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.cancel()
            with contextlib.suppress(BaseException):
                await ahead


def clip(table: pa.Table, lo: bytes, hi: bytes) -> pa.Table:
    """The rows of a sorted table with ``lo <= key < hi``."""
    if not table.num_rows:
        return table
    keys = table.column("key")
    if keys[0].as_py() >= lo and keys[-1].as_py() < hi:
        return table
    start = pc.sum(pc.less(keys, lo)).as_py() or 0
    stop = pc.sum(pc.less(keys, hi)).as_py() or 0
    return table.slice(start, max(0, stop - start))


def live_rows(table: pa.Table, now_s: float) -> pa.Table:
    """Only the entries that are current objects or index entries: not tombstones, not
    expired."""
    expiry = table.column("expiry")
    if pc.max(expiry).as_py() in (0, None) and pc.max(table.column("status")).as_py() in (
            ACTIVE, None):
        return table  # the common case, checked with two reductions
    keep = pc.and_(pc.equal(table.column("status"), ACTIVE),
                   pc.or_(pc.equal(expiry, 0), pc.greater(expiry, int(now_s))))
    return table if pc.all(keep).as_py() else table.filter(keep)


def sources(view: LedgerView, lo: bytes, hi: bytes,
            segments: SegmentFilter | None = None) -> list:
    """The scan's sources, newest first (their files' blocks that may hold keys of
    ``segments`` only, if given)."""
    files = view.files
    out: list = [_Overlay(view, lo, hi, segments)]
    out += [_Run(view.host, (sst,), lo, hi, files.foreign_owns, segments)
            for sst in files.levels[0]]
    out += [_Run(view.host, level, lo, hi, files.foreign_owns, segments)
            for level in files.levels[1:] if level]
    return out


async def merge_sorted(sources: list, combine) -> AsyncIterator[pa.Table]:
    """Merge sources of key-sorted tables (each with ``async next()``, ``None`` at its end, and
    ``async close()``) into key-sorted tables, window by window: a window ends at the smallest
    last key any source holds, every source gives up its rows up to there, and
    ``combine(parts)`` sorts the window's parts into one table. Sources are closed at the
    end, or when the caller stops early."""
    try:
        bufs = list(await asyncio.gather(*(s.next() for s in sources)))
        while True:
            active = [i for i, b in enumerate(bufs) if b is not None]
            if not active:
                return
            if len(active) == 1:  # one source left: its rows are already sorted
                (i,) = active
                out, bufs[i] = bufs[i], await sources[i].next()
            else:
                bound = min(bufs[i].column("key")[-1].as_py() for i in active)
                parts, drained = [], []
                for i in active:
                    buf = bufs[i]
                    n = pc.sum(pc.less_equal(buf.column("key"), bound)).as_py() or 0
                    if n:
                        parts.append(buf.slice(0, n))
                    if n == buf.num_rows:
                        drained.append(i)
                    else:
                        bufs[i] = buf.slice(n)
                for i, table in zip(drained, await asyncio.gather(*(sources[i].next()
                                                                     for i in drained))):
                    bufs[i] = table
                out = parts[0] if len(parts) == 1 else combine(parts)
            if out.num_rows:
                yield out
    finally:
        for s in sources:
            await s.close()


async def scan(view: LedgerView, lo: bytes, hi: bytes, *, now_s: float | None = None,
               live: bool = True,
               segments: SegmentFilter | None = None) -> AsyncIterator[pa.Table]:
    """The newest entry of each Ledger key in ``[lo, hi)`` at ``view``, in key order, as Arrow
    tables of :data:`~leveled_ray.codec.LEDGER_SCHEMA` rows. ``live`` leaves out tombstones and
    entries expired at ``now_s`` (default: the view's clock). ``segments`` keeps only the keys
    of those tictac segments, and reads only the blocks that may hold them (many to a
    request), keeping only those keys of each, and only those keys of the entries in memory:
    a key's segment is the same in every source, so the merge still finds its newest.
    Closing the iterator early stops its reads."""
    now_s = view.clock() if now_s is None else now_s
    upto = view.sqn if getattr(view, "past", False) else None

    def combine(parts: list[pa.Table]) -> pa.Table:
        table = pa.concat_tables(parts).combine_chunks()
        if upto is not None:  # a past view: what came later is not there yet
            table = table.filter(pc.less_equal(table.column("sqn"), upto))
        return sort_and_dedupe(table)

    merged = merge_sorted(sources(view, lo, hi, segments), combine)
    async with contextlib.aclosing(merged) as tables:
        async for out in tables:
            if live:
                out = live_rows(out, now_s)
            if out.num_rows:
                yield out
