"""Reading a store in this process, without Ray and without claiming it.

:class:`StoreReader` loads the latest manifest, replays the journal entries that are not yet in
the Ledger into memory, and then answers GET and HEAD through its own file clerks. It never
writes, so it never fences the store's writer; the CLI uses it for ``get``, ``head`` and
``inspect``. It sees the store as of when it was opened.
"""

from __future__ import annotations

import asyncio

from .codec import Head, LedgerRows, entry_to_head
from .errors import InvalidArgumentError
from .files import journal as jfmt
from .files.clerk import ClerkHost
from .files.journal_slots import slot_info, tail_slots
from .files.store import ObjectStore
from .manifest.model import Manifest
from .manifest.store import ManifestStore
from .options import Options
from .views import JournalIndex, LedgerFiles, journal_fetch_many, ledger_get


class StoreReader:
    """A read-only view of a store, opened with :meth:`open` (async) or :func:`open_reader`."""

    def __init__(self, store: ObjectStore, manifest_id: int, manifest: Manifest,
                 tail: list[jfmt.JournalInfo], cache_bytes: int):
        self.store = store
        self.manifest_id = manifest_id
        self.manifest = manifest
        self.tail = tail  # journal files not yet recorded in the manifest
        self.host = ClerkHost(store, cache_bytes)
        self.files = LedgerFiles(manifest_id, manifest.levels, manifest.ledger_sqn)
        self.journal = JournalIndex(list(manifest.journal) + tail)
        self.overlay: dict[bytes, tuple] = {}  # journal changes not yet in the Ledger

    @classmethod
    async def open(cls, store: ObjectStore, cache_bytes: int = 32 << 20) -> StoreReader:
        latest = await ManifestStore(store).latest()
        if latest is None:
            raise InvalidArgumentError(f"no store at {store.url}")
        mid, m = latest
        tail = [await slot_info(store, s) for s in await tail_slots(store, m.journal_next_slot)]
        reader = cls(store, mid, m, tail, cache_bytes)
        await reader._replay()
        return reader

    async def _replay(self) -> None:
        after = self.manifest.ledger_sqn
        for info in sorted(self.journal.files, key=lambda f: f.min_sqn):
            if info.max_sqn <= after:
                continue
            rows = LedgerRows()
            for rec in await self.host.journal(info).read_records(after):
                rows.add_record(rec)
            self.overlay.update(rows.entries())

    async def entry(self, lkey: bytes) -> tuple | None:
        entry = self.overlay.get(lkey)
        if entry is not None:
            return entry
        return await ledger_get(self.host, self.files, lkey)

    async def head(self, lkey: bytes) -> Head | None:
        entry = await self.entry(lkey)
        return None if entry is None else entry_to_head(*entry)

    async def get(self, lkey: bytes) -> bytes | None:
        head = await self.head(lkey)
        if head is None:
            return None
        record = (await journal_fetch_many(self.host, self.journal, [head.sqn])).get(head.sqn)
        return None if record is None else record.value


def open_reader(url: str, options: Options | None = None) -> StoreReader:
    """Open a :class:`StoreReader` from synchronous code."""
    return asyncio.run(StoreReader.open(ObjectStore.from_url(url, options)))
