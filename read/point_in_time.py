"""A frozen view of a store, read from the object store in whatever process holds it.

:class:`PointInTime` is what snapshots, checkpoint readers and the CLI's reader share: the
Ledger files of one manifest version, the journal files that hold their values, and an overlay
of the Ledger entries that were not yet in those files (the Bookie's cache, or journal entries
replayed by a reader). It is picklable (the overlay travels as one Arrow batch) and opens its
own object-store client and file clerks lazily, so a copy sent to a Ray task or a Spark
executor reads the same point in time there.

It never writes. Whoever builds one makes sure its files are not deleted while it is in use: a
snapshot registers with the store's owners, a reader pins a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..clock import Clock, system_clock
from ..codec import LEDGER_SCHEMA, Head, LedgerRows, checked_key, checked_keys, entry_to_head
from ..errors import CorruptObjectError, LeveledError
from ..files.clerk import ClerkHost
from ..files.journal import JournalInfo
from ..files.routed import store_for
from ..files.sst import first_of_each_key, sort_and_dedupe
from ..files.store import ObjectStore
from ..options import Options
from .scan import scan
from .views import JournalIndex, LedgerFiles, journal_values, ledger_entries, values_by_sqn


class PointInTime:
    """Ledger files + journal files + an overlay of newer entries, as of SQN ``sqn``.

    The overlay is given as Arrow batches of Ledger rows in SQN order (the Bookie's recent
    pushes: taking a snapshot copies references, not entries), and becomes a dict on the first
    read, in the process that reads.
    """

    def __init__(self, url: str, options: Options, files: LedgerFiles,
                 journal: list[JournalInfo], batches: list[pa.RecordBatch], sqn: int,
                 store: ObjectStore | None = None, routes: tuple = (),
                 host: ClerkHost | None = None, clock: Clock = system_clock,
                 history_sqn: int = 0, past: bool = False,
                 split_points: dict[str, int] | None = None):
        self.url = url
        self.options = options
        self.clock = clock  # TTL expiry is judged by it
        self.files = files
        self.journal = JournalIndex(journal)
        self.history_sqn = history_sqn  # its journal holds every change after this SQN
        #: A split shard's: where its history stops being each ancestor's (see
        #: :mod:`~leveled_ray.manifest.split_points`).
        self.split_points = dict(split_points or {})
        #: A view of an earlier moment (see :mod:`.history_view`): its files hold entries
        #: above its SQN, which its scans leave out.
        self.past = past
        self._batches = list(batches)
        self._overlay: dict[bytes, tuple] | None = None
        self._sorted_overlay: tuple[list[bytes], pa.Table] | None = None
        self.sqn = sqn
        self._store = store
        self._given_store = store is not None
        self.routes = tuple(getattr(store, "routes", routes))  # a clone's ancestors
        self._host = host  # the file clerks to read through (made lazily when not given)

    @property
    def overlay(self) -> dict[bytes, tuple]:
        """Ledger key -> newest entry not in the Ledger files (later batches win)."""
        if self._overlay is None:
            self._overlay = {}
            for batch in self._batches:
                self._overlay.update(LedgerRows.from_batch(batch).entries())
            self._batches = []
        return self._overlay

    def overlay_table(self) -> tuple[list[bytes], pa.Table]:
        """The overlay sorted by key, as ``(keys, table)`` (built once, for range scans)."""
        if self._sorted_overlay is None:
            if self._overlay is None:
                table = _later_batches_win(self._batches)
            else:
                table = sort_and_dedupe(
                    LedgerRows.from_entries(self._overlay.items()).to_batch())
            table = table.combine_chunks()
            self._sorted_overlay = (table.column("key").to_pylist(), table)
        return self._sorted_overlay

    # -- pickling: the overlay as Arrow batches, no clients --

    def __getstate__(self) -> dict:
        batches = self._batches
        if self._overlay:  # already a dict (or a reader's replay): send it as one batch
            batches = [LedgerRows.from_entries(self._overlay.items()).to_batch()]
        return {"url": self.url, "options": self.options, "files": self.files,
                "journal": self.journal.files, "sqn": self.sqn, "routes": self.routes,
                "batches": batches, "clock": self.clock, "history_sqn": self.history_sqn,
                "past": self.past, "split_points": self.split_points}

    def __setstate__(self, state: dict) -> None:
        PointInTime.__init__(self, state["url"], state["options"], state["files"],
                             state["journal"], state["batches"], state["sqn"],
                             routes=state["routes"], clock=state["clock"],
                             history_sqn=state["history_sqn"], past=state["past"],
                             split_points=state["split_points"])

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = store_for(ObjectStore.from_url(self.url, self.options), self.routes,
                                    self.options)
        return self._store

    @property
    def host(self) -> ClerkHost:
        if self._host is None:
            budget = self.options.cache_size // 4
            if self._given_store:
                self._host = ClerkHost(self.store, budget)
            else:  # files are immutable: views of one store in this process share a cache
                self._host = ClerkHost.shared(self.store, (self.url, self.routes, self.options),
                                              budget)
            if self._host.disk is None:
                self._host.use_disk(self.options, self.url, self.files.store_id)
        return self._host

    # -- reads by Ledger key --

    async def entries(self, lkeys: list[bytes]) -> list[tuple | None]:
        return await ledger_entries(self.host, self.files, lkeys, self.overlay)

    async def head_many(self, lkeys: list[bytes]) -> list[Head | None]:
        now_s = self.clock()
        return [None if e is None else entry_to_head(*e, now_s=now_s)
                for e in await self.entries(lkeys)]

    async def get_many(self, lkeys: list[bytes]) -> list[bytes | None]:
        return (await self.versions(lkeys, True))[1]

    async def versions(self, lkeys: list[bytes], values: bool
                       ) -> tuple[list[Head | None], list[bytes | None] | None]:
        """The heads of ``lkeys`` and, with ``values``, their values: one lookup of each."""
        heads = await self.head_many(lkeys)
        if not values:
            return heads, None
        found, _ = await values_by_sqn(self.host, self.journal,
                                       [h.sqn for h in heads if h is not None])
        return heads, [None if h is None else found[h.sqn] for h in heads]

    async def head(self, lkey: bytes) -> Head | None:
        return (await self.head_many([lkey]))[0]

    async def get(self, lkey: bytes) -> bytes | None:
        return (await self.get_many([lkey]))[0]

    # -- range reads (a merged view of several shards answers the same calls) --

    def scan(self, lo: bytes, hi: bytes, **kwargs):
        """:func:`~.scan.scan` of this view."""
        return scan(self, lo, hi, **kwargs)

    async def values(self, rows: pa.Table) -> pa.Array:
        """The values of live Ledger rows (their ``sqn`` column), in row order."""
        return await journal_values(self.host, self.journal, rows.column("sqn").to_numpy())

    def in_turn(self, make):
        """``make(view)`` of this view: a stream a merged view chains shard by shard."""
        return make(self)


class KeyReads:
    """``get``/``head``/``get_many``/``head_many`` by ``(bucket, key)``, checked like the
    store's, over the :class:`PointInTime` that ``_view_for`` gives: the ``*_async`` forms,
    whose synchronous twins :func:`~leveled_ray.files.sync.with_sync_twins` makes on the
    handle."""

    def _view_for(self, needs_values: bool) -> PointInTime:
        raise NotImplementedError

    async def _view_async(self, needs_values: bool) -> PointInTime:
        return self._view_for(needs_values)

    async def _explain(self, damage: CorruptObjectError) -> LeveledError:
        """The error to raise for a missing or corrupt object this view needed (a reader whose
        checkpoint is gone says so instead)."""
        return damage

    async def _read(self, needs_values: bool, read):
        view = await self._view_async(needs_values)
        try:
            return await read(view)
        except CorruptObjectError as exc:
            raise await self._explain(exc) from None

    async def get_async(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)`` at this point in time, or ``None``. Cost: at most
        one ranged read per Ledger file that may hold the key, and one for the value (file
        footers and recent blocks are cached)."""
        return await self._read(True, lambda v: v.get(checked_key(bucket, key, v.options)))

    async def head_async(self, bucket, key) -> Head | None:
        """The object's :class:`Head` at this point in time, or ``None``. Cost:
        ``get_async``'s, without the value's read."""
        return await self._read(False, lambda v: v.head(checked_key(bucket, key, v.options)))

    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """Values of many ``(bucket, key)`` pairs at this point in time, ``None`` where
        absent. Cost: the keys are looked up together, file by file (one batched read per
        Ledger file involved), and the values read by journal file."""
        return await self._read(True, lambda v: v.get_many(checked_keys(pairs, v.options)))

    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """Heads of many ``(bucket, key)`` pairs at this point in time, ``None`` where absent.
        Cost: the lookups of ``get_many_async``, without the values."""
        return await self._read(False, lambda v: v.head_many(checked_keys(pairs, v.options)))

    async def _versions_async(self, pairs: Iterable[Sequence], values: bool
                             ) -> tuple[list[Head | None], list[bytes | None] | None]:
        """``head_many_async`` and, with ``values``, ``get_many_async`` of the same pairs,
        with one lookup of each key (a snapshot transaction's read)."""
        return await self._read(values, lambda v: v.versions(checked_keys(pairs, v.options),
                                                             values))


def _later_batches_win(batches: list[pa.RecordBatch]) -> pa.Table:
    """The overlay's rows sorted by key, one per key: the later batch's, as
    :attr:`PointInTime.overlay` takes them (within a batch, the highest SQN's). A view of a
    past SQN (:func:`~leveled_ray.read.history_view.view_at`) ends with a batch of older
    entries than the ones before it, which must win all the same."""
    table = pa.Table.from_batches(batches, LEDGER_SCHEMA)
    if table.num_rows == 0 or len(batches) == 1:
        return sort_and_dedupe(table)
    order = np.repeat(np.arange(len(batches), dtype=np.int32), [b.num_rows for b in batches])
    table = table.append_column("batch", pa.array(order)).sort_by(
        [("key", "ascending"), ("batch", "descending"), ("sqn", "descending")])
    return first_of_each_key(table).drop_columns(["batch"])
