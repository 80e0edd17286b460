"""File clerks: one small state machine per file, hosted inside a Ray actor (leveled's file clerks).

A clerk moves ``reading -> delete_pending -> deleted`` (a file is written whole, by one put, so
its clerk starts once it exists) and every read of its file goes through it. Clerks cache their
file's footer (index and bloom) and blocks in their host's cache, one LRU with a byte budget
shared by every clerk in the host, so memory stays bounded however many files there are.
Clerks know nothing of levels: the manifest says which file is where.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ..codec.tictac import SegmentFilter
from ..errors import CorruptObjectError, LeveledError
from . import journal as jfmt
from . import sst as sfmt
from .framing import FOOTER_READ, codec_id
from .journal import JournalInfo, JournalRecord
from .lru import LruCache
from .names import sst_name
from .sst import SstInfo
from .store import NotFound, ObjectStore
from .sync import off_loop


class _LoadAbandoned(Exception):
    """A shared load whose reader was cancelled: the others waiting for it load it again."""

class FileState(str, enum.Enum):
    READING = "reading"
    DELETE_PENDING = "delete_pending"
    DELETED = "deleted"


#: The only moves a clerk can make.
TRANSITIONS: dict[FileState, frozenset[FileState]] = {
    FileState.READING: frozenset({FileState.DELETE_PENDING}),
    FileState.DELETE_PENDING: frozenset({FileState.DELETED}),
    FileState.DELETED: frozenset(),
}


class FileStateError(LeveledError):
    """A clerk was asked for a move its state machine does not allow (an internal bug)."""


#: Picking up to this many rows out of decoded blocks is done on the event loop; more, in a
#: thread.
INLINE_ROWS = 64


class FileClerk:
    """The state machine of one file, plus its cached reads."""

    kind = "file"

    def __init__(self, host: ClerkHost, name: str, size: int,
                 state: FileState = FileState.READING):
        self.host = host
        self.name = name
        self.size = size
        self.state = state
        self.removed_in: int | None = None  # manifest id whose change removed this file
        self._loading: dict[Any, asyncio.Future] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.state.value})"

    def move(self, new: FileState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise FileStateError(f"{self.name}: cannot move from {self.state.value} to {new.value}")
        self.state = new

    def retire(self, removed_in: int) -> None:
        """A committed manifest change (version ``removed_in``) removed this file: it keeps
        serving reads until its owner allows the delete."""
        self.move(FileState.DELETE_PENDING)
        self.removed_in = removed_in

    async def delete(self) -> None:
        """Delete the object (the owner said yes, and no read of an older view is running).
        If the delete fails, the file stays ``delete_pending`` and is tried again."""
        await self.host.store.delete_async(self.name)
        self.move(FileState.DELETED)
        self.host.forget(self.name)

    def _check_readable(self) -> None:
        if self.state not in (FileState.READING, FileState.DELETE_PENDING):
            raise FileStateError(f"{self.name} is {self.state.value}: it cannot be read")

    async def _cached(self, part, load: Callable[[], Awaitable[Any]], nbytes) -> Any:
        """A cached part of this file, loading it once even when many readers ask at once."""
        key = (self.name, part)
        value = self.host.cache.get(key)
        if value is not None:
            return value
        loop = asyncio.get_running_loop()
        loading = (part, loop)  # a host shared by several event loops keeps their loads apart
        while (pending := self._loading.get(loading)) is not None:
            try:
                return await asyncio.shield(pending)
            except _LoadAbandoned:  # its reader was cancelled, not this one: load it here
                continue
        fut = loop.create_future()
        self._loading[loading] = fut
        try:
            value = await load()
            self.host.cache.put(key, value, nbytes(value))
            fut.set_result(value)
            return value
        except BaseException as exc:
            fut.set_exception(_LoadAbandoned() if isinstance(exc, asyncio.CancelledError)
                              else exc)
            fut.exception()  # mark retrieved: the caller re-raises it
            raise
        finally:
            del self._loading[loading]

    async def _footer_bytes(self, span, guess: int = FOOTER_READ) -> bytes:
        """The file's last bytes, covering its footer: one ranged GET of ``guess`` bytes, or
        two when the footer is larger. ``span(size, tail, path)`` locates the footer."""
        get_range = self.host.store.get_range_async
        tail = await self._read(get_range, max(0, self.size - guess), self.size)
        foff, _ = span(self.size, tail, self.name)
        if self.size - foff > len(tail):
            tail = await self._read(get_range, foff, self.size)
        return tail

    async def _read(self, read, *args):
        """``read(name, *args)``, a read of this file. It is listed in a manifest version that
        something reads, so a missing object is damage (:class:`CorruptObjectError` naming
        it), not a request that a retry could mend."""
        try:
            return await read(self.name, *args)
        except NotFound:
            raise CorruptObjectError(self.name, 0, "listed in the manifest, but missing from "
                                     "the object store") from None


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
            raw = await self._read(self.host.store.get_range_async, lo, hi)
            return sfmt.decode_block(raw, footer.checksums[i], self.name, lo)

        return await self._cached(("block", i), load, lambda b: b.nbytes)

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
            raws = await self._read(self.host.store.get_ranges_async,
                                    footer.offsets[missing].tolist(),
                                    footer.offsets[missing + 1].tolist())

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

    def __init__(self, store: ObjectStore, cache_bytes: int):
        self.store = store
        self.cache = LruCache(cache_bytes)
        self.clerks: dict[str, FileClerk] = {}
        self._readers: Counter[int] = Counter()

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
