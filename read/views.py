"""What a reader sees of the files: the Ledger's levels and the Journal's SQN index.

Both are immutable values built from a manifest (or from the Penciller's and Inker's latest
state) and read through the file clerks of a :class:`~leveled_ray.files.clerk.ClerkHost`. The
Bookie serves GET and HEAD from them in its own process, so a lookup costs no extra actor hop.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, filterfalse

import numpy as np
import pyarrow as pa

from ..codec.owned import SETTING as OWNS
from ..codec.owned import Owns
from ..errors import ObjectStoreError
from ..files.bloom import key_hash, key_hashes
from ..files.clerk import ClerkHost
from ..files.journal import KIND_DATA, NO_SLOT, JournalInfo
from ..files.lru import LruCache
from ..files.routed import is_foreign
from ..files.sst import SstInfo
from ..files.sync import off_loop
from ..manifest.model import KeptTree, Manifest


@dataclass(frozen=True)
class LedgerFiles:
    """The Ledger's files at one manifest version: ``levels[0]`` newest first, deeper levels
    sorted by key range and not overlapping. ``owns``: a split shard's run of partitions
    (see :mod:`leveled_ray.codec.owned`), whose inherited files hold other keys too."""

    version: int
    levels: tuple[tuple[SstInfo, ...], ...]
    persisted_sqn: int
    owns: Owns | None = None
    #: The tree saved of exactly these files, if any (:meth:`Manifest.kept_tree`).
    tree: KeptTree | None = None
    #: The id of the store they are of (what the node's disk cache keys its files by).
    store_id: str = ""

    @classmethod
    def of(cls, version: int, manifest: Manifest) -> LedgerFiles:
        """The files manifest ``version`` lists."""
        return cls(version, manifest.levels, manifest.ledger_sqn,
                   Owns.decode(manifest.setting(OWNS)), manifest.kept_tree(),
                   manifest.store_id)

    def foreign_owns(self, file: SstInfo | JournalInfo) -> Owns | None:
        """The run to filter ``file``'s entries by: set for a split shard's inherited file
        (an SST or a journal file)."""
        return self.owns if self.owns is not None and is_foreign(file.name) else None

    def candidates(self, lkey: bytes):
        """Files that may hold ``lkey``, in the order they must be searched (newest first)."""
        for sst in self.levels[0]:
            if sst.min_key <= lkey <= sst.max_key:
                yield sst
        for level, maxes in zip(self.levels[1:], self._max_keys[1:]):
            i = bisect.bisect_left(maxes, lkey)
            if i < len(level) and level[i].min_key <= lkey:
                yield level[i]

    @functools.cached_property
    def _max_keys(self) -> list[list[bytes]]:
        return [[s.max_key for s in level] for level in self.levels]

    @functools.cached_property
    def _min_keys(self) -> list[list[bytes]]:
        return [[s.min_key for s in level] for level in self.levels]

    def runs_of(self, level: int, keys: list[bytes]) -> list[tuple[int, int, int]]:
        """For sorted ``keys`` and a level below L0: ``(file, lo, hi)`` for each file of the
        level whose key range holds some of them, ``keys[lo:hi]`` being those. Two searches
        per file found, whether the keys or the files are the more."""
        mins, maxes = self._min_keys[level], self._max_keys[level]
        out, i, n = [], 0, len(keys)
        while i < n:
            f = bisect.bisect_left(maxes, keys[i])
            if f == len(maxes):
                break
            if mins[f] > keys[i]:  # keys between two files' ranges: in neither
                i = bisect.bisect_left(keys, mins[f], i)
                continue
            hi = bisect.bisect_right(keys, maxes[f], i)
            out.append((f, i, hi))
            i = hi
        return out

    @property
    def file_count(self) -> int:
        return sum(len(level) for level in self.levels)


async def ledger_get(host: ClerkHost, files: LedgerFiles, lkey: bytes) -> tuple | None:
    """The newest Ledger entry for ``lkey`` in the files: bloom first, then one block read."""
    khash = key_hash(lkey)
    for sst in files.candidates(lkey):
        entry = await host.sst(sst).get(lkey, khash)
        if entry is not None:
            return entry
    return None


async def ledger_entries(host: ClerkHost, files: LedgerFiles | Callable[[], LedgerFiles],
                         lkeys: list[bytes], overlay: Mapping[bytes, tuple]
                         ) -> list[tuple | None]:
    """The newest Ledger entry of each key: the overlay of changes not yet in the files (the
    Bookie's cache, or a view's batches), then the files. The one read path of the Bookie's
    lookups, snapshots and readers.

    Many keys are looked up together, each file and block once (:func:`_files_entries`);
    one key the short way.
    ``files`` may be a function giving the current files: it is called in the same step as
    the overlay is read, so an entry that has just left the overlay is found in the files
    that took it."""
    current = files() if callable(files) else files
    get = overlay.get
    out = [get(k) for k in lkeys]
    missing = [i for i, e in enumerate(out) if e is None]
    if len(missing) == 1:
        out[missing[0]] = await ledger_get(host, current, lkeys[missing[0]])
    elif missing:
        found = await _files_entries(host, current, [lkeys[i] for i in missing])
        for i, entry in zip(missing, found):
            out[i] = entry
    return out


async def _files_entries(host: ClerkHost, files: LedgerFiles,
                         lkeys: list[bytes]) -> list[tuple | None]:
    """The newest entry of each key in the files: the distinct keys sorted once, then level
    by level (newest first), each file given the run of the sorted keys in its range, and
    each block searched once for all of its keys. The keys stay a list of bytes: numpy's
    searches of object arrays compare them one Python call at a time."""
    todo = sorted(set(lkeys))
    found: dict[bytes, tuple] = {}
    for n, level in enumerate(files.levels):
        if not todo or not level:
            continue
        if n == 0:  # L0 files overlap: newest first, each for the keys still not found
            for sst in level:
                lo = bisect.bisect_left(todo, sst.min_key)
                hi = bisect.bisect_right(todo, sst.max_key, lo)
                if lo < hi:
                    await _probe(host, sst, todo[lo:hi], found)
                    todo = list(filterfalse(found.__contains__, todo))
            continue
        await asyncio.gather(*(_probe(host, level[f], todo[lo:hi], found)
                               for f, lo, hi in files.runs_of(n, todo)))
        todo = list(filterfalse(found.__contains__, todo))
    return list(map(found.get, lkeys))


async def _probe(host: ClerkHost, sst: SstInfo, keys: list[bytes],
                 found: dict[bytes, tuple]) -> None:
    """Look up ``keys`` (sorted, within the file's key range) in one file, each block once
    for all of its keys; the entries found go to ``found``.

    The blocks in the cache are taken under one lock and searched with no await (a task per
    block cost a warm batch more than the searches). The bloom filter is asked only about the
    keys of the blocks that would have to be read: a block at hand answers faster, and
    exactly."""
    clerk = host.sst(sst)
    footer = await clerk.footer()
    spans = footer.block_spans(keys)
    ids = [b for b, _, _ in spans]
    held = clerk.cached_blocks(ids)
    missing = [j for j, block in enumerate(held) if block is None]
    if missing:
        maybe = footer.bloom.may_contain_many(key_hashes(keys))
        wanted = [j for j in missing if maybe[spans[j][1]:spans[j][2]].any()]
        for j, block in zip(wanted, await clerk.load_blocks([ids[j] for j in wanted])):
            held[j] = block
    for (_, lo, hi), block in zip(spans, held):
        if block is not None:
            names = keys[lo:hi]
            got = block.lookup(names)
            found.update(compress(zip(names, got), got))


class JournalIndex:
    """Which journal file holds which SQN (data files only; fences hold none)."""

    def __init__(self, files=()):
        self._files: list[JournalInfo] = []
        self._max: list[int] = []
        self.extend(files)

    def next_slot(self) -> int:
        """One past the highest journal slot among these files (0 with none)."""
        return max((f.slot + 1 for f in self._files if f.slot != NO_SLOT), default=0)

    def extend(self, files) -> None:
        new = sorted((f for f in files if f.kind == KIND_DATA and f.entries),
                     key=lambda f: f.max_sqn)
        if not new:
            return
        if self._max and new[0].max_sqn <= self._max[-1]:  # not past the end: sort again
            new = sorted(self._files + new, key=lambda f: f.max_sqn)
            self._files, self._max = [], []
        # Group commit adds files past the end: appending keeps a write's cost independent
        # of how many files the journal has.
        self._files.extend(new)
        self._max.extend(f.max_sqn for f in new)

    def group(self, sqns: np.ndarray) -> list[tuple[JournalInfo, int, int]]:
        """For increasing ``sqns``: ``(file, lo, hi)`` for each file holding some of them,
        ``sqns[lo:hi]`` being the ones in its SQN range. Files hold disjoint SQN ranges; the
        cost follows the files found, not the files there are."""
        out, i, n = [], 0, len(sqns)
        while i < n:
            at = bisect.bisect_left(self._max, int(sqns[i]))
            if at == len(self._files):
                break
            info = self._files[at]
            hi = int(np.searchsorted(sqns, np.uint64(info.max_sqn), side="right"))
            lo = max(i, int(np.searchsorted(sqns, np.uint64(info.min_sqn), side="left")))
            if lo < hi:
                out.append((info, lo, hi))
            i = hi
        return out

    def find(self, sqn: int) -> JournalInfo | None:
        i = bisect.bisect_left(self._max, sqn)
        if i < len(self._files) and self._files[i].min_sqn <= sqn:
            return self._files[i]
        return None

    @property
    def files(self) -> list[JournalInfo]:
        return list(self._files)

    def __len__(self) -> int:
        return len(self._files)


async def values_by_sqn(host: ClerkHost, index: JournalIndex, sqns: Iterable[int],
                       cache: LruCache | None = None) -> tuple[dict[int, bytes], int]:
    """``(value of each SQN, how many came from the Journal)``: from ``cache`` (values by
    SQN) when it has them, else from the Journal (and then cached). Raises
    :class:`ObjectStoreError` if the Journal has no entry for one."""
    sqns = list(sqns)
    values = dict(zip(sqns, cache.get_many(sqns) if cache is not None else [None] * len(sqns)))
    missing = [s for s, v in values.items() if v is None]
    if missing:  # as columns: each file's blocks read and decoded once, one take
        read = (await journal_values(host, index, missing, keep_blocks=True)).to_pylist()
        values.update(zip(missing, read))
        if cache is not None:
            for sqn, value in zip(missing, read):
                cache.put(sqn, value, len(value) + 64)
    return values, len(missing)


async def journal_values(host: ClerkHost, index: JournalIndex, sqns,
                         keep_blocks: bool = False) -> pa.Array:
    """The values of ``sqns`` (any order, repeats allowed), as one Arrow array in that order:
    the blocks that hold them are decoded and one ``take`` gathers the values, with no Python
    object per value. ``keep_blocks``: keep the decoded blocks in the file cache (point
    reads). Raises :class:`ObjectStoreError` if the Journal has no entry for one."""
    sqns = np.asarray(sqns, dtype=np.uint64)
    back = None  # where each SQN asked for is in ``ordered``, unless it is ``sqns`` itself
    ordered = sqns
    if not np.all(sqns[1:] > sqns[:-1]):
        order = np.argsort(sqns, kind="stable")
        ordered = sqns[order]
        first = np.concatenate(([True], ordered[1:] != ordered[:-1]))
        back = np.empty(len(sqns), dtype=np.int64)
        back[order] = np.cumsum(first) - 1
        ordered = ordered[first]

    async def blocks(info: JournalInfo, lo: int, hi: int) -> tuple[int, pa.Table, np.ndarray]:
        clerk = host.journal(info)
        rows = (await clerk.footer()).positions(ordered[lo:hi])
        if np.any(rows < 0):
            lost = ordered[lo:hi][rows < 0]
            raise ObjectStoreError(f"journal file {info.name} has no entry for SQNs "
                                   f"{lost[:5].tolist()}", definite=True)
        return lo, *await clerk.blocks_holding(rows, keep_blocks)

    # In SQN order, as index.group gives the files (their SQN ranges do not overlap).
    parts = await asyncio.gather(*(blocks(*g) for g in index.group(ordered)))
    if sum(len(where) for _, _, where in parts) != len(ordered):
        held = np.zeros(len(ordered), dtype=bool)
        for lo, _, where in parts:
            held[lo:lo + len(where)] = True
        raise ObjectStoreError(f"the Journal has no value for SQNs "
                               f"{ordered[~held][:5].tolist()}", definite=True)
    if not parts:
        return pa.array([], pa.binary())
    # One take over every block read: positions within each file's blocks, shifted by the
    # rows of the files before it, in the order asked for.
    shift = np.cumsum([0] + [t.num_rows for _, t, _ in parts[:-1]])
    where = np.concatenate([w + s for (_, _, w), s in zip(parts, shift)])
    if back is not None:
        where = where[back]
    values = pa.chunked_array([c for _, t, _ in parts for c in t.column("value").chunks],
                              pa.binary())
    if len(where) and where[-1] - where[0] == len(where) - 1 and np.array_equal(
            where, np.arange(where[0], where[0] + len(where))):
        # A run of consecutive entries (a key-order fold of keys written together): a
        # slice, not a take, which copies each value once more.
        return values.slice(int(where[0]), len(where)).combine_chunks()
    return await off_loop(lambda: values.take(where).combine_chunks())
