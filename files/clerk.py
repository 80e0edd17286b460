"""File clerks: one small state machine per file, hosted inside a Ray actor (leveled's file clerks).

A clerk moves ``reading -> delete_pending -> deleted`` (a file is written whole, by one put, so
its clerk starts once it exists; see :mod:`.file_clerk`) and every read of its file goes
through it. Clerks cache their file's footer (index and bloom) and blocks in their host's
cache, one LRU with a byte budget shared by every clerk in the host, so memory stays bounded
however many files there are; behind it, the node's disk cache keeps what point reads fetched
(:mod:`.disk_cache`). Clerks know nothing of levels: the manifest says which file is where.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter, deque

import numpy as np
import pyarrow as pa

from ..codec.tictac import SegmentFilter
from ..errors import CorruptObjectError
from . import journal as jfmt
from . import sst as sfmt
from .disk_cache import DiskTier, node_cache
from .file_clerk import FileClerk, FileState
from .framing import codec_id
from .journal import JournalInfo, JournalRecord
from .lru import LruCache
from .names import sst_name
from .sst import SstInfo
from .store import ObjectStore
from .sync import off_loop

#: Picking up to this many rows out of decoded blocks is done on the event loop; more, in a
#: thread.
INLINE_ROWS = 64


class SstClerk(FileClerk):
    """Reads one Ledger SST: footer (bloom, block index) once, then one block per lookup."""

    kind = "sst"

    def __init__(self, host, info: SstInfo, state=FileState.READING):
        super().__init__(host, info.name, info.size, state)
        self.info = info

    async def footer(self) -> sfmt.SstFooter:
        self._check_readable()

        async def load():
            tail = await self._footer_bytes(sfmt.footer_span,
                                            sfmt.footer_guess(self.info.entries))
            return sfmt.parse_footer(self.size, tail, self.name)

        return await self._cached("footer", load, lambda f: f.nbytes)

    async def block(self, i: int) -> sfmt.Block:
        footer = await self.footer()

        async def load():
            lo, hi = footer.block_range(i)
            raw = await self._range(lo, hi)
            return sfmt.decode_block(raw, footer.checksums[i], self.name, lo)

        return await self._cached(("block", i), load, lambda b: b.nbytes)

    async def load_blocks(self, ids: list[int]) -> list[sfmt.Block]:
        """Blocks ``ids`` (distinct) that the cache lacked a moment ago: those it still lacks
        are read together (one look in the node's disk cache, one request for the rest) and
        decoded, in a thread when there are many."""
        cache = self.host.cache
        held = cache.get_many([(self.name, ("block", i)) for i in ids])
        missing = [j for j, block in enumerate(held) if block is None]
        if len(missing) == 1:  # one block: the shared load of :meth:`block`
            held[missing[0]] = await self.block(ids[missing[0]])
        elif missing:
            footer = await self.footer()
            spans = [footer.block_range(ids[j]) for j in missing]
            raws = await self._ranges([lo for lo, _ in spans], [hi for _, hi in spans])

            def decode() -> list[sfmt.Block]:
                return [sfmt.decode_block(raw, footer.checksums[ids[j]], self.name, lo)
                        for raw, j, (lo, _) in zip(raws, missing, spans)]

            for j, block in zip(missing, decode() if len(missing) <= 4 else await off_loop(decode)):
                cache.put((self.name, ("block", ids[j])), block, block.nbytes)
                held[j] = block
        return held  # type: ignore[return-value]

    async def warm(self, ids: list[int], fill: float) -> tuple[int, int]:
        """Load blocks ``ids`` that the node's disk cache holds, and the host's cache lacks,
        into the host's cache, each with its entry index built (as a block read again and
        again has it), while it holds less than ``fill`` of its budget: a warm start
        (:mod:`.warm_start`). Returns how many it loaded, and how many of those it looked
        for the disk cache lacked."""
        footer = await self.footer()

        def decode(found: list[tuple[int, int, bytes]]) -> list[sfmt.Block]:
            blocks = [sfmt.decode_block(raw, footer.checksums[i], self.name, lo)
                      for i, lo, raw in found]
            for block in blocks:
                block.build_index()
            return blocks

        return await self._warm_blocks(ids, footer.block_count, footer.block_range, decode,
                                       fill)

    def cached_blocks(self, ids: list[int]) -> list[sfmt.Block | None]:
        """Blocks ``ids`` as far as the cache holds them (``None`` for the rest), taken under
        one lock. Only hits are counted: :meth:`block` counts the misses as it loads them."""
        self._check_readable()
        return self.host.cache.get_many([(self.name, ("block", i)) for i in ids],
                                        count_misses=False)

    async def get(self, lkey: bytes, khash: int) -> tuple | None:
        """The entry for ``lkey`` in this file, or ``None``: at most one ranged GET."""
        footer = await self.footer()
        if not footer.bloom.may_contain_hash(khash):
            return None
        i = footer.block_for(lkey)
        if i is None:
            return None
        return (await self.block(i)).get(lkey)

    async def read_blocks(self, first: int, end: int) -> list:
        """Blocks ``first`` to ``end - 1`` as Arrow batches, read with one ranged GET and
        decoded in a thread, without filling the cache (scans read each block once)."""
        footer = await self.footer()
        raw = await self._read(self.host.store.get_range_async, footer.offsets[first],
                               footer.offsets[end])
        return await off_loop(sfmt.decode_blocks, raw, footer, first, self.name)

    async def segment_rows(self, segments: SegmentFilter, lo: bytes, hi: bytes,
                           max_bytes: int) -> pa.Table | None:
        """The rows of the blocks that may hold keys in ``[lo, hi)`` (the caller clips the
        edge blocks' rows) that are keys of ``segments``, or ``None`` if none can be: only
        the blocks whose segment hints may hold them are read (one request of many ranges
        per ``max_bytes`` of blocks), decoded and filtered in a thread, without filling the
        cache (a fold of a few tictac segments finds a few rows here and there). A row's
        segment is told by its hint in a version 4 file, and by hashing its key in an older
        one."""
        footer = await self.footer()
        first, end = sfmt.block_span(footer, lo, hi)
        hits = footer.hits(segments.segments, segments.bits)
        held = footer.blocks_with(hits)[first:end]
        blocks = deque(first + b for b in np.flatnonzero(held).tolist())
        tables = []
        while blocks:
            picked, size = [], 0
            while blocks and (not picked or size + footer.block_size(blocks[0]) <= max_bytes):
                size += footer.block_size(blocks[0])
                picked.append(blocks.popleft())
            raws = await self._read(self.host.store.get_ranges_async,
                                    [footer.offsets[b] for b in picked],
                                    [footer.offsets[b + 1] for b in picked])
            tables.append(await off_loop(self._rows_of, footer, picked, raws, hits, segments))
        return pa.concat_tables(tables) if tables else None

    def _rows_of(self, footer: sfmt.SstFooter, blocks: list[int], raws: list,
                 hits: np.ndarray | None, segments: SegmentFilter) -> pa.Table:
        batches = [sfmt.decode_batch(raw, footer.checksums[b], self.name, footer.offsets[b])
                   for raw, b in zip(raws, blocks)]
        if not footer.hints_per_row:
            table = pa.Table.from_batches(batches)
            return table.filter(segments.mask(table.column("key").to_pylist()))
        keep = footer.rows_in(blocks, hits)
        if len(keep) != sum(batch.num_rows for batch in batches):
            raise CorruptObjectError(self.name, footer.offsets[blocks[0]],
                                     "segment hints do not match the blocks' rows")
        return sfmt.kept_rows(batches, keep)

    async def read_table(self):
        """Every entry of the file, validated (bulk reads: merges, verification)."""
        self._check_readable()
        data = await self._read(self.host.store.get_async)
        return sfmt.read_all(data, self.name)[1]


class JournalClerk(FileClerk):
    """Reads one journal file: the SQN and block index once, then the blocks that hold the
    SQNs asked for; or, for a scan that wants all of it, the whole file in one GET."""

    kind = "journal"

    def __init__(self, host, info: JournalInfo, state=FileState.READING):
        super().__init__(host, info.name, info.size, state)
        self.info = info

    async def footer(self) -> jfmt.JournalFooter:
        self._check_readable()

        async def load():
            tail = await self._footer_bytes(jfmt.footer_span)
            return jfmt.parse_footer(self.size, tail, self.name)

        return await self._cached("footer", load, lambda f: f.nbytes)

    def footer_at_hand(self) -> bool:
        """Whether the footer is cached: reading only the blocks wanted then costs one GET."""
        return (self.name, "footer") in self.host.cache

    async def whole(self) -> pa.Table:
        """Every row of the file, from one GET of the whole file (its footer is then cached):
        for a scan that wants every entry of a file whose footer is not at hand, which would
        otherwise read the footer, then the blocks, in two round trips."""
        self._check_readable()
        data = memoryview(await self._read(self.host.store.get_async))
        footer = jfmt.parse_footer(self.size, data, self.name)
        self.host.cache.put((self.name, "footer"), footer, footer.nbytes)
        offsets = footer.offsets.tolist()
        blocks = range(len(offsets) - 1)
        raws = [data[offsets[i]:offsets[i + 1]] for i in blocks]
        return await off_loop(jfmt.decode_blocks, raws, footer, blocks, self.name)

    async def fetch_many(self, sqns: list[int],
                         values_only: bool = False) -> dict[int, JournalRecord]:
        """Entries for many SQNs of this file, each block read once; absent SQNs are left
        out. With ``values_only``, each SQN maps to its value, not its whole record."""
        footer = await self.footer()
        rows = footer.positions(np.unique(np.asarray(sqns, dtype=np.uint64)))
        rows = rows[rows >= 0]
        if not len(rows):
            return {}
        table = await self.rows(rows)
        found = table.column("sqn").to_pylist()
        if values_only:
            return dict(zip(found, table.column("value").to_pylist()))
        batch = table.combine_chunks().to_batches()[0]
        return dict(zip(found, jfmt.records(batch, self.name)))

    async def rows(self, rows: np.ndarray) -> pa.Table:
        """Rows ``rows`` (ascending, no repeats) of the file, as a table of the Journal's
        schema."""
        table, where = await self.blocks_holding(rows)
        if len(where) == table.num_rows:
            return table  # every row of the blocks read
        if len(where) <= INLINE_ROWS:
            return table.take(where)
        return await off_loop(table.take, where)

    async def blocks_holding(self, rows: np.ndarray, keep: bool = False
                             ) -> tuple[pa.Table, np.ndarray]:
        """The blocks that hold rows ``rows`` (ascending, no repeats), decoded, and where each
        of those rows is in them: ``(table of the blocks, positions)``. The blocks not at hand
        are read with one request (the store coalesces nearby ranges) and decoded in a thread
        (one block, on the event loop). ``keep`` keeps decoded blocks in the host's cache:
        point reads come back to the blocks near the values they asked for, while scans,
        which read each block once, leave the cache alone."""
        footer = await self.footer()
        blocks = footer.blocks_of(rows)
        wanted = blocks[np.flatnonzero(np.diff(blocks, prepend=-1))]  # rows are ascending
        cache = self.host.cache if keep else None
        held = {}
        if cache is not None:
            for i, block in zip(wanted.tolist(), cache.get_many(
                    [(self.name, ("block", i)) for i in wanted.tolist()])):
                if block is not None:
                    held[i] = block
        missing = wanted if not held else np.asarray(
            [i for i in wanted.tolist() if i not in held], dtype=wanted.dtype)
        table = None
        if len(missing):
            starts, ends = footer.offsets[missing].tolist(), footer.offsets[missing + 1].tolist()
            raws = await (self._ranges(starts, ends) if keep else
                          self._read(self.host.store.get_ranges_async, starts, ends))

            def decode() -> pa.Table:
                return jfmt.decode_blocks(raws, footer, missing, self.name)

            table = decode() if len(missing) == 1 else await off_loop(decode)
            if cache is not None:
                for i, block in zip(missing.tolist(), table.to_batches()):
                    cache.put((self.name, ("block", i)), block, block.nbytes)
                    held[i] = block
        if held:
            table = pa.Table.from_batches([held[i] for i in wanted.tolist()],
                                          jfmt.JOURNAL_SCHEMA)
        sizes = footer.rows[wanted + 1] - footer.rows[wanted]
        firsts = np.cumsum(sizes) - sizes
        where = rows - footer.rows[blocks] + firsts[np.searchsorted(wanted, blocks)]
        return table, where

    async def warm(self, ids: list[int], fill: float) -> tuple[int, int]:
        """Load blocks ``ids`` that the node's disk cache holds, and the host's cache lacks,
        into the host's cache while it holds less than ``fill`` of its budget: a warm start
        (:mod:`.warm_start`). Returns how many it loaded, and how many of those it looked
        for the disk cache lacked."""
        footer = await self.footer()

        def decode(found: list[tuple[int, int, bytes]]) -> list[pa.RecordBatch]:
            return jfmt.decode_blocks([raw for _, _, raw in found], footer,
                                      [i for i, _, _ in found], self.name).to_batches()

        return await self._warm_blocks(ids, len(footer.offsets) - 1, footer.block_range, decode,
                                       fill)

    async def row_spans(self, rows: np.ndarray, span_bytes: int):
        """Rows ``rows`` (ascending), as an async iterator of tables that each come from at
        most ``span_bytes`` of the file: for scans that must not hold the whole file."""
        footer = await self.footer()
        start = footer.offsets[footer.blocks_of(rows)]
        k = 0
        while k < len(rows):
            j = int(np.searchsorted(start, start[k] + span_bytes, side="left"))
            j = max(j, k + 1)
            yield await self.rows(rows[k:j])
            k = j

    async def read_records(self, after_sqn: int = 0) -> list[JournalRecord]:
        self._check_readable()
        data = await self._read(self.host.store.get_async)
        return list(jfmt.iter_records(data, self.name, after_sqn))


async def write_sst(store: ObjectStore, table, options, tree_hashes=None) -> SstInfo:
    """Encode sorted, deduplicated Ledger rows as a new SST (under a never-reused name) and
    store it; returns its info. Encoding runs in a thread: Arrow and lz4 release the GIL.
    ``tree_hashes``: see :func:`~leveled_ray.files.sst.build_sst`."""

    name = sst_name()
    data, info = await asyncio.to_thread(
        sfmt.build_sst, name, table, codec=codec_id(options.compression),
        block_bytes=options.ledger.sst_block_bytes,
        bloom_bits_per_key=options.ledger.bloom_bits_per_key, tree_hashes=tree_hashes,
    )
    await store.put_if_absent_async(name, data, unique=True)
    return info


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()
_MAX_SHARED_CLERKS = 20_000


class ClerkHost:
    """The clerks of every file one actor reads, sharing one byte-bounded cache.

    Readers say which view (manifest version) they read with :meth:`reading`, so a file removed
    in version ``V`` is not deleted while a read of an older view is still running.
    """

    def __init__(self, store: ObjectStore, cache_bytes: int, disk: DiskTier | None = None):
        self.store = store
        self.cache = LruCache(cache_bytes)
        #: The node's disk cache, second to ``cache``, for point reads (see :meth:`use_disk`).
        self.disk = disk
        self.clerks: dict[str, FileClerk] = {}
        self._readers: Counter[int] = Counter()

    def use_disk(self, options, url: str, store_id: str) -> None:
        """Read through the node's disk cache too, as the files of store ``store_id`` (at
        ``url``), if ``options`` cache that store (see :func:`.disk_cache.node_cache`)."""
        cache = node_cache(options, url) if store_id else None
        self.disk = None if cache is None else DiskTier(cache, store_id)

    @contextlib.contextmanager
    def reading(self, version: int):
        self._readers[version] += 1
        try:
            yield
        finally:
            self._readers[version] -= 1
            if not self._readers[version]:
                del self._readers[version]

    def readers_before(self, version: int) -> int:
        return sum(n for v, n in self._readers.items() if v < version)

    def reader_versions(self) -> list[int]:
        """The views reads are running on now."""
        return list(self._readers)

    def pending_deletes(self) -> list[FileClerk]:
        return [c for c in self.clerks.values() if c.state is FileState.DELETE_PENDING]

    def sst(self, info: SstInfo) -> SstClerk:
        clerk = self.clerks.get(info.name)
        if clerk is None:
            clerk = self.clerks[info.name] = SstClerk(self, info)
        return clerk  # type: ignore[return-value]

    def journal(self, info: JournalInfo) -> JournalClerk:
        clerk = self.clerks.get(info.name)
        if clerk is None:
            clerk = self.clerks[info.name] = JournalClerk(self, info)
        return clerk  # type: ignore[return-value]

    @classmethod
    def shared(cls, store: ObjectStore, key, cache_bytes: int) -> ClerkHost:
        """One host per ``key`` in this process, for readers of immutable files: snapshots,
        queries and checkpoint readers of one store reuse its cached footers and blocks."""
        with _SHARED_LOCK:
            host = _SHARED.get(key)
            if host is None:
                host = _SHARED[key] = cls(store, cache_bytes)
            elif len(host.clerks) > _MAX_SHARED_CLERKS:
                host.clerks = {}  # clerks are cheap to remake; the cache is keyed by file
            return host

    def forget(self, name: str) -> None:
        """Drop a file's clerk and everything cached for it."""
        self.clerks.pop(name, None)
        self.cache.drop_prefix(name)

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for clerk in self.clerks.values():
            out[clerk.state.value] = out.get(clerk.state.value, 0) + 1
        return out
