"""What a reader sees of the files: the Ledger's levels and the Journal's SQN index.

Both are immutable values built from a manifest (or from the Penciller's and Inker's latest
state) and read through the file clerks of a :class:`~leveled_ray.files.clerk.ClerkHost`. The
Bookie serves GET and HEAD from them in its own process, so a lookup costs no extra actor hop.
"""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass

from .files.bloom import key_hash
from .files.clerk import ClerkHost
from .files.journal import KIND_DATA, JournalInfo, JournalRecord
from .files.sst import SstInfo


@dataclass(frozen=True)
class LedgerFiles:
    """The Ledger's files at one manifest version: ``levels[0]`` newest first, deeper levels
    sorted by key range and not overlapping."""

    version: int
    levels: tuple[tuple[SstInfo, ...], ...]
    persisted_sqn: int

    def candidates(self, lkey: bytes):
        """Files that may hold ``lkey``, in the order they must be searched (newest first)."""
        for sst in self.levels[0]:
            if sst.min_key <= lkey <= sst.max_key:
                yield sst
        for level in self.levels[1:]:
            i = bisect.bisect_left([s.max_key for s in level], lkey)
            if i < len(level) and level[i].min_key <= lkey:
                yield level[i]

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


class JournalIndex:
    """Which journal file holds which SQN (data files only; fences hold none)."""

    def __init__(self, files=()):
        self._files: list[JournalInfo] = []
        self._max: list[int] = []
        self.extend(files)

    def extend(self, files) -> None:
        new = [f for f in files if f.kind == KIND_DATA and f.entries]
        if not new:
            return
        self._files = sorted(self._files + new, key=lambda f: f.max_sqn)
        self._max = [f.max_sqn for f in self._files]

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


async def journal_fetch_many(host: ClerkHost, index: JournalIndex, sqns: list[int],
                             values_only: bool = False) -> dict[int, JournalRecord]:
    """Records (or with ``values_only``, values) for many SQNs: one request per journal file
    involved, files read concurrently."""
    by_file: dict[str, tuple[JournalInfo, list[int]]] = {}
    for sqn in sqns:
        info = index.find(sqn)
        if info is not None:
            by_file.setdefault(info.name, (info, []))[1].append(sqn)
    found: dict[int, JournalRecord] = {}
    for part in await asyncio.gather(*(host.journal(info).fetch_many(wanted, values_only)
                                       for info, wanted in by_file.values())):
        found.update(part)
    return found
