"""The Inker's clerk: journal compaction, off the Inker's process.

It samples entries of each candidate journal file and asks the Ledger (through the Bookie's
view) which are still current, scores the files, and rewrites the best run (see
:mod:`leveled_ray.manifest.journal_compaction`) into new journal files of up to
``journal.max_file_bytes``. A run of small group-commit files the Inker chose is rewritten as one
without scoring (:meth:`InkerClerk.rewrite`). The Inker commits the manifest change; the old
files then go to ``delete_pending``.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field, replace

from ..codec import OP_KEY_DELTA
from ..codec.owned import Owns
from ..files import journal as jfmt
from ..files.clerk import ClerkHost
from ..files.framing import codec_id
from ..files.names import compacted_journal_name
from ..files.routed import is_foreign
from ..files.store import ObjectStore
from ..manifest.journal_compaction import best_run, file_score, plan_rewrite
from ..options import Options
from .remote import call, process_stats

#: Journal files read at once while rewriting a run.
READ_AHEAD = 16
#: About what one sampled entry holds in memory besides its key.
SAMPLE_BYTES = 256


@dataclass(frozen=True)
class CompactionResult:
    """One journal compaction: the candidates' scores, the files it replaced (names), the
    files it wrote in their place, and the SQN history begins after once they replace them."""

    scores: list[float]
    removed: list[str] = field(default_factory=list)
    added: list[jfmt.JournalInfo] = field(default_factory=list)
    history_sqn: int = 0

    def __add__(self, other: CompactionResult) -> CompactionResult:
        """Two rewrites of one compaction as one result."""
        return CompactionResult(self.scores + other.scores, self.removed + other.removed,
                                self.added + other.added,
                                max(self.history_sqn, other.history_sqn))


def _owned(records: list, info: jfmt.JournalInfo, owns: Owns | None) -> list:
    """The records of ``info`` a split shard owns: all of them, but in an inherited file."""
    if owns is None or not is_foreign(info.name):
        return records
    return [r for r in records if owns.owns(r.lkey)]


class InkerClerk:
    """Plain-object logic of the compaction worker; the Bookie starts it as a Ray actor."""

    def __init__(self, store: ObjectStore, options: Options, bookie):
        self.store = store
        self.options = options
        self.codec = codec_id(options.compression)
        self.bookie = bookie  # answers "which SQN is current for these keys?"
        self.host = ClerkHost(store, 8 << 20)
        self.rng = random.Random()
        self.counters = {"runs": 0, "files_in": 0, "files_out": 0, "entries_in": 0,
                         "entries_out": 0, "key_deltas": 0, "bytes_read": 0,
                         "bytes_written": 0, "seconds": 0.0,
                         # what the latest rewrite kept only for history (leases, history_s)
                         "history_entries": 0, "history_bytes": 0}

    async def _current(self, lkeys: list[bytes]) -> dict[bytes, int | None]:
        keys = sorted(set(lkeys))
        return dict(zip(keys, await call(self.bookie.current_sqns, keys)))

    async def _plan(self, records, persisted_sqn: int, protect: int | None):
        current = await self._current([r.lkey for r in records if r.op != OP_KEY_DELTA])
        return plan_rewrite([(r.sqn, r.op, r.lkey, r.indexes) for r in records], current,
                            persisted_sqn, self.options.journal.recovery_strategy, protect)

    async def score(self, info: jfmt.JournalInfo, persisted_sqn: int,
                    protect: int | None, owns: Owns | None = None) -> float:
        """100 x the share of a sample of the file's entries that a rewrite would keep with
        its value."""
        records = await self._sample(info)
        taken = len(records)
        records = _owned(records, info, owns)  # the others' count as dead
        fates, _ = await self._plan(records, persisted_sqn, protect)
        live = sum(1 for r, f in zip(records, fates)
                   if r.op != OP_KEY_DELTA and f.op is not None and f.keep_value)
        return file_score(live, taken)

    async def _sample(self, info: jfmt.JournalInfo) -> list[jfmt.JournalRecord]:
        """A sample of the file's entries, by SQN, without their values: drawn and read once
        per file, and kept in the host's cache. A file never changes, so a later score of it
        only asks which of these are still current, and reads nothing from the store."""
        key = (info.name, "sample")
        records = self.host.cache.get(key)
        if records is None:
            clerk = self.host.journal(info)
            sqns = (await clerk.footer()).sqns.tolist()
            picked = self.rng.sample(sqns, min(len(sqns), self.options.journal.compaction_sample))
            records = sorted((replace(r, value=None) for r in
                              (await clerk.fetch_many(picked)).values()), key=lambda r: r.sqn)
            self.host.cache.put(key, records, sum(SAMPLE_BYTES + len(r.lkey) for r in records))
        return records

    async def compact(self, candidates: list, persisted_sqn: int, epoch: int,
                      protect: int | None = None, owns: Owns | None = None) -> CompactionResult:
        """Score the candidates (consecutive journal files, oldest first) and rewrite the best
        run (nothing removed when no run qualifies). Changes above ``protect`` are kept. With
        ``owns`` (a split shard's run), inherited files lose the entries of keys it does not
        own."""
        started = time.monotonic()
        scores = [await self.score(f, persisted_sqn, protect, owns) for f in candidates]
        o = self.options
        run = best_run(scores, o.journal.max_run_length, o.journal.singlefile_compactionpercentage,
                       o.journal.maxrunlength_compactionpercentage)
        if run is None:
            return CompactionResult(scores)
        chosen = candidates[run.start : run.start + run.length]
        return CompactionResult(scores, *await self._replace(chosen, persisted_sqn, epoch,
                                                              started, protect, owns))

    async def rewrite(self, chosen: list, persisted_sqn: int, epoch: int,
                      protect: int | None = None, owns: Owns | None = None) -> CompactionResult:
        """Rewrite ``chosen`` (consecutive journal files, oldest first) without scoring them:
        a run of small files (see :func:`~leveled_ray.manifest.journal_compaction.small_run`)."""
        return CompactionResult([], *await self._replace(chosen, persisted_sqn, epoch,
                                                         time.monotonic(), protect, owns))

    async def _replace(self, chosen, persisted_sqn: int, epoch: int, started: float,
                       protect: int | None, owns: Owns | None) -> tuple[list[str], list, int]:
        added, history_sqn = await self._rewrite(chosen, persisted_sqn, epoch, protect, owns)
        for f in chosen:
            self.host.forget(f.name)
        self.counters["runs"] += 1
        self.counters["files_in"] += len(chosen)
        self.counters["files_out"] += len(added)
        self.counters["bytes_read"] += sum(f.size for f in chosen)
        self.counters["seconds"] += time.monotonic() - started
        return [f.name for f in chosen], added, history_sqn

    async def _rewrite(self, chosen, persisted_sqn: int, epoch: int,
                       protect: int | None, owns: Owns | None) -> tuple[list, int]:
        records = []
        for i in range(0, len(chosen), READ_AHEAD):  # a run of small files is many GETs
            batch = chosen[i : i + READ_AHEAD]
            for info, part in zip(batch, await asyncio.gather(
                    *(self.host.journal(info).read_records() for info in batch))):
                records += _owned(part, info, owns)
        records.sort(key=lambda r: r.sqn)
        fates, history_sqn = await self._plan(records, persisted_sqn, protect)
        kept, size = [], 0
        outputs: list[jfmt.JournalInfo] = []
        held = [r for r, fate in zip(records, fates) if fate.held]
        self.counters["history_entries"] = len(held)
        self.counters["history_bytes"] = sum(len(r.lkey) + len(r.value or b"") for r in held)
        for r, fate in zip(records, fates):
            if fate.op is None:
                continue
            op, indexes = fate.op, fate.indexes
            value = r.value if fate.keep_value else None
            self.counters["key_deltas"] += op == OP_KEY_DELTA and r.op != OP_KEY_DELTA
            entry = (r.sqn, op, r.lkey, value, indexes, r.expiry, r.extra, r.last_modified,
                     r.batch)
            entry_size = len(r.lkey) + len(value or b"") + 64
            if kept and size + entry_size > self.options.journal.max_file_bytes:
                outputs.append(await self._write(kept, epoch))
                kept, size = [], 0
            kept.append(entry)
            size += entry_size
        if kept:
            outputs.append(await self._write(kept, epoch))
        self.counters["entries_in"] += len(records)
        self.counters["entries_out"] += sum(f.entries for f in outputs)
        return outputs, history_sqn

    async def _write(self, records, epoch: int) -> jfmt.JournalInfo:
        name = compacted_journal_name()
        data, info = jfmt.build_journal(name, epoch, jfmt.NO_SLOT, records, codec=self.codec)
        await self.store.put_if_absent_async(name, data, unique=True)
        self.counters["bytes_written"] += info.size
        return info

    def stats(self) -> dict:
        return {**self.counters, "io": self.store.stats.as_dict(), "process": process_stats()}
