"""Reading a store in this process, without Ray and without claiming it.

:class:`StoreReader` is a :class:`~leveled_ray.read.point_in_time.PointInTime` built from a
manifest:
the latest one (plus the journal files written since it, for a running store), or the one a
checkpoint pins. The journal entries not yet in the Ledger are replayed into the overlay. It
never writes, so it never fences the store's writer; the CLI and ``lr.reader`` use it. It sees
the store as of when it was opened.
"""
from __future__ import annotations

from ..clock import Clock, system_clock
from ..codec import LedgerRows
from ..errors import (
    InvalidArgumentError,
)
from ..files import journal as jfmt
from ..files.journal_slots import slot_info, tail_slots
from ..files.routed import store_for
from ..files.store import ObjectStore
from ..files.sync import run_sync
from ..manifest.model import Manifest
from ..manifest.split_points import split_points
from ..manifest.store import ManifestStore
from ..options import Options
from .point_in_time import PointInTime
from .queries import Queries
from .views import LedgerFiles


class StoreReader(PointInTime, Queries):
    """A read-only view of one manifest version, opened with :meth:`open` or
    :func:`open_reader`. Its queries (folds, index queries) read this one view."""

    def __init__(self, store: ObjectStore, manifest_id: int, manifest: Manifest,
                 tail: list[jfmt.JournalInfo], options: Options, clock: Clock = system_clock):
        files = LedgerFiles.of(manifest_id, manifest)
        journal = list(manifest.journal) + tail
        top = max([manifest.ledger_sqn] + [j.max_sqn for j in journal if j.entries])
        super().__init__(store.url, options, files, journal, [], top, store=store, clock=clock,
                         history_sqn=manifest.history_sqn,
                         split_points=split_points(manifest))
        self.manifest_id = manifest_id
        self.manifest = manifest
        self.tail = tail  # journal files not yet recorded in the manifest

    @classmethod
    async def open(cls, store: ObjectStore, options: Options | None = None, *,
                   manifest_id: int | None = None, clock: Clock = system_clock) -> StoreReader:
        """The latest manifest and the journal tail after it; or exactly ``manifest_id`` (a
        checkpoint's version: everything it holds is catalogued, so there is no tail)."""
        manifests = ManifestStore(store)
        if manifest_id is None:
            latest = await manifests.latest()
            if latest is None:
                raise InvalidArgumentError(f"no store at {store.url}")
            manifest_id, m = latest
            tail = [await slot_info(store, s)
                    for s in await tail_slots(store, m.journal_next_slot)]
        else:
            m, tail = await manifests.read_pinned(manifest_id), []
        options = options or Options()
        store = store_for(store, m.stores, options)
        reader = cls(store, manifest_id, m, tail, options, clock)
        await reader._replay()
        return reader

    async def _query_view_async(self, needs_values: bool):
        return self, None

    async def _replay(self) -> None:
        after = self.manifest.ledger_sqn
        for info in sorted(self.journal.files, key=lambda f: f.min_sqn):
            if info.max_sqn <= after:
                continue
            rows = LedgerRows()
            owns = self.files.foreign_owns(info)  # a split shard's inherited file
            for rec in await self.host.journal(info).read_records(after):
                if owns is None or owns.owns(rec.lkey):
                    rows.add_record(rec)
            self.overlay.update(rows.entries())


def open_reader(url: str, options: Options | None = None) -> StoreReader:
    """Open a :class:`StoreReader` from synchronous code."""
    return run_sync(StoreReader.open(ObjectStore.from_url(url, options), options))
