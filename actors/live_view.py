"""The Bookie's live view of the store, and its reads.

The view is the Ledger's files and the Journal's files as this process last learnt them from
the Penciller and the Inker, plus the Ledger cache of changes the files do not hold yet. Reads
go through the read path that snapshots and readers share
(:func:`~leveled_ray.read.views.ledger_entries`, :func:`~leveled_ray.read.views.values_by_sqn`),
with the cache as the overlay. A read registers the view version it starts on, so no file of
it is deleted while the read runs; adopting a new version retires the files it replaced.
"""

from __future__ import annotations

import contextlib

from ..clock import Clock, system_clock
from ..codec import LedgerEntry, live_entries, live_sqns
from ..files import warm_start
from ..files.clerk import ClerkHost
from ..files.journal import JournalInfo
from ..files.lru import LruCache
from ..files.store import ObjectStore
from ..manifest.model import Manifest
from ..manifest.split_points import split_points
from ..options import Options
from ..read.key_ranges import index_range
from ..read.point_in_time import PointInTime
from ..read.queries import index_entries
from ..read.views import JournalIndex, LedgerFiles, ledger_entries, values_by_sqn
from .inker import JournalView
from .ledger_cache import LedgerCache


class LiveView:
    """What the Bookie reads: see the module docstring. ``retired()`` is called when files
    were retired (the reaper then looks for them)."""

    def __init__(self, url: str, options: Options, store: ObjectStore, cache: LedgerCache,
                 retired, clock: Clock = system_clock):
        self.url, self.options = url, options
        self.clock = clock
        self.cache = cache
        self.values = LruCache(options.cache_size // 4)  # recent values, by SQN
        self._file_budget = options.cache_size - options.cache_size // 4
        self.retired = retired
        self.files = LedgerFiles(-1, ((),), 0)
        self.journal = JournalIndex()
        self.journal_version = -1
        self.history_sqn = 0
        self.split_points: dict[str, int] = {}
        self.use_store(store)
        self.counters = {"gets": 0, "get_bytes": 0, "heads": 0, "journal_reads": 0}

    def use_store(self, store: ObjectStore) -> None:
        """Read through ``store`` (a clone's routes its ancestors' files to their stores)."""
        self.store = store
        self.host = ClerkHost(store, self._file_budget)
        self.host.use_disk(self.options, self.url, self.files.store_id)

    def disk_cached(self, manifest: Manifest) -> bool:
        """Read through the node's disk cache if the options cache this store; whether so."""
        self.host.use_disk(self.options, self.url, manifest.store_id)
        return self.host.disk is not None

    async def warm_start(self, manifest: Manifest) -> int:
        """Load what the store's last Bookie on this node held in memory, as far as the
        node's disk cache and ``manifest``'s files allow (:mod:`~leveled_ray.files.warm_start`);
        how many blocks."""
        return await warm_start.warm(self.host, manifest.sst_files(), manifest.journal,
                                     self.values)

    # -- adopting new files ---

    def reset(self, version: int, manifest: Manifest, journal: list[JournalInfo]) -> None:
        """Start from manifest ``version`` and the Inker's journal files (the disk cache was
        chosen for this store by :meth:`disk_cached`, with the same manifest)."""
        self.journal_version = version
        self.journal = JournalIndex(journal)
        self.history_sqn = manifest.history_sqn
        self.split_points = split_points(manifest)
        self.files = LedgerFiles.of(version, manifest)

    def adopt(self, files: LedgerFiles) -> None:
        """New Ledger files: retire the ones they replaced, drop the cache entries they hold."""
        kept = {f.name for level in files.levels for f in level}
        removed = [f for level in self.files.levels for f in level if f.name not in kept]
        for info in removed:  # a committed manifest change removed them
            self.host.sst(info).retire(files.version)
        self.files = files
        self.cache.drop_persisted(files.persisted_sqn)
        if removed:
            self.retired()

    def adopt_journal(self, view: JournalView) -> None:
        """A journal compaction's files: keep the files appended since the Inker made the
        view, retire the ones it replaced."""
        if view.version <= self.journal_version:
            return
        removed = set(view.removed)
        listed = {f.name for f in view.files}
        newer = [f for f in self.journal.files if f.name not in removed and f.name not in listed]
        retired = [f for f in self.journal.files if f.name in removed]
        self.journal = JournalIndex(list(view.files) + newer)
        self.journal_version = view.version
        self.history_sqn = max(self.history_sqn, view.history_sqn)
        for info in retired:
            self.host.journal(info).retire(view.version)
        if retired:
            self.retired()

    def remember_values(self, sqns, values: list | None, nbytes: int) -> None:
        """Recent writes stay readable from memory (``values`` of ``nbytes`` in all), unless
        the group is large enough to push a quarter of the value cache out."""
        if values is None or nbytes > self.values.budget // 4:
            return
        for sqn, value in zip(sqns, values):
            if value is not None:
                self.values.put(sqn, value, len(value) + 64)

    # -- reads ---

    async def entries(self, lkeys: list[bytes]) -> list[LedgerEntry | None]:
        """Ledger entries of many keys. The cache and the current files are read together,
        with no await between: a change leaves the cache in the same step as the files that
        hold it arrive."""
        with self.host.reading(self.files.version):
            return await ledger_entries(self.host, lambda: self.files, lkeys, self.cache)

    async def current_entries(self, keys: set[bytes]) -> dict[bytes, LedgerEntry | None]:
        """The Ledger entries of the keys that are neither pending nor cached, read so that a
        writer can use them with what is pending and cached, with no await in between."""
        stored: dict[bytes, LedgerEntry | None] = {}
        while True:
            files = self.files
            looked = [k for k in keys if k not in stored
                      and self.cache.known_entry(k, {}) is None]
            if not looked:
                return stored
            stored.update(zip(looked, await self.entries(looked)))
            if self.files is not files:  # the Ledger's files changed meanwhile: look again
                stored = {}

    async def get_many(self, lkeys: list[bytes]) -> list[bytes | None]:
        """Values of many keys: Ledger lookups first, then the values missing from the value
        cache, with one request per journal file."""
        self.counters["gets"] += len(lkeys)
        with self.host.reading(self.journal_version):  # the values come from these files
            sqns = live_sqns(await self.entries(lkeys), self.clock())
            values, fetched = await values_by_sqn(
                self.host, self.journal, [s for s in sqns if s is not None], self.values)
        self.counters["journal_reads"] += fetched
        found = list(map(values.get, sqns))  # None stays None
        self.counters["get_bytes"] += sum(map(len, filter(None, found)))
        return found

    async def read_versions(self, lkeys: list[bytes], values: bool
                            ) -> tuple[list[tuple | None], list[bytes | None] | None]:
        """The keys' live entries (as :meth:`head_many` gives them), all as of one moment,
        and with ``values`` the value each names (by SQN, so of that very version): what a
        transaction reads."""
        self.counters["gets" if values else "heads"] += len(lkeys)
        with self.host.reading(self.journal_version):
            entries = live_entries(await self.entries(lkeys), self.clock())
            if not values:
                return entries, None
            found, fetched = await values_by_sqn(
                self.host, self.journal, [e[0] for e in entries if e is not None], self.values)
        self.counters["journal_reads"] += fetched
        return entries, [None if e is None else found[e[0]] for e in entries]

    async def head_many(self, lkeys: list[bytes]) -> list[tuple | None]:
        """The entries of the keys' current objects, as plain tuples (``None`` for the rest):
        the client makes them :class:`Head` objects (:func:`~leveled_ray.codec.heads_of`)."""
        self.counters["heads"] += len(lkeys)
        now_s = self.clock()
        return live_entries(await self.entries(lkeys), now_s)

    async def index_query(self, query: dict, sqn: int) -> list:
        """A bounded index query on this view, pinned for the query, with the cached changes
        of the range."""
        lo, hi = index_range(query["bucket"], query["field"], query["start"], query["end"],
                             query["start_key"], max_key_bytes=self.options.max_key_bytes)
        view = PointInTime(self.url, self.options, self.files, [],
                           [self.cache.cached_rows(lo, hi).to_batch()], sqn,
                           store=self.store, host=self.host)
        with self.host.reading(self.files.version):
            return [item async for batch in index_entries(view, **query) for item in batch]

    async def live_range(self, lo: bytes, hi: bytes, sqn: int) -> list[tuple[bytes, int]]:
        """The ``(key, SQN)`` of every live Ledger entry in ``[lo, hi)`` that is durable, in
        key order: the files and the cached changes as they are at the call."""
        view = PointInTime(self.url, self.options, self.files, [],
                           [self.cache.cached_rows(lo, hi).to_batch()], sqn,
                           store=self.store, host=self.host)
        found: list[tuple[bytes, int]] = []
        with self.host.reading(self.files.version):
            async with contextlib.aclosing(view.scan(lo, hi)) as tables:
                async for table in tables:
                    found += zip(table.column("key").to_pylist(),
                                 table.column("sqn").to_pylist())
        return found

    @contextlib.contextmanager
    def pinned(self):
        """Keep every file of the current Ledger and Journal versions from deletion; yields
        the two versions."""
        versions = self.files.version, self.journal_version
        with self.host.reading(versions[0]), self.host.reading(versions[1]):
            yield versions

    def point_in_time(self, sqn: int) -> PointInTime:
        """This view, frozen (for a snapshot: references to immutable batches, no copy)."""
        return PointInTime(self.url, self.options, self.files, self.journal.files,
                           self.cache.overlay_batches(), sqn, store=self.store, clock=self.clock,
                           history_sqn=self.history_sqn, split_points=self.split_points)
