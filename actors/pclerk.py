"""The Penciller's clerk: does the Ledger's merges, in an actor of its own, off the Bookie's
process (which hosts the Penciller).

It polls for work, which the Bookie hands on from the Penciller. For each merge it reads the
input SSTs through its own file clerks, merges them with Arrow (concatenate, sort by key then
SQN descending, keep the newest entry of each key; at the basement also drop tombstones and
expired entries), writes the result as new SSTs of at most ``sst_max_keys`` entries, and hands
the outputs back. The Penciller commits the manifest change; the files it removed then go to
``delete_pending``.

Memory per merge is bounded by its inputs: all of L0 (a few L0 files) plus the L1 files they
overlap, or one file plus the files it overlaps in the next level.
"""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa
import pyarrow.compute as pc

from ..clock import Clock
from ..codec import ACTIVE, LEDGER_SCHEMA
from ..errors import FencedError, StoreClosedError
from ..files import sst as sfmt
from ..files.clerk import ClerkHost, write_sst
from ..files.sst import SstInfo
from ..files.store import ObjectStore
from ..manifest.levels import MergeJob
from ..options import Options
from .remote import call, process_stats

#: Pause after a failed merge before the next one is chosen.
FAILURE_PAUSE_S = 1.0
#: How long each ask for merge work waits for one to come due (a long poll: an idle clerk
#: makes one call a second, and a merge that comes due starts at once).
MERGE_POLL_S = 1.0

#: The clerk's counters before its first merge (also a store's, before its clerk starts).
NO_MERGES = {"merges": 0, "moves": 0, "files_written": 0, "bytes_written": 0, "bytes_read": 0,
             "rows_in": 0, "rows_out": 0, "failures": 0, "seconds": 0.0}


def merge_tables(tables: list[pa.Table], basement: bool, now_s: float) -> pa.Table:
    """The merged content of some SSTs: the newest entry per key; at the basement, only live
    entries (tombstones and expired entries have nothing older left to hide)."""
    merged = sfmt.sort_and_dedupe(pa.concat_tables(tables).cast(LEDGER_SCHEMA))
    if basement and merged.num_rows:
        expiry = merged.column("expiry")
        live = pc.and_(pc.equal(merged.column("status"), ACTIVE),
                       pc.or_(pc.equal(expiry, 0), pc.greater(expiry, int(now_s))))
        merged = merged.filter(live)
    return merged


def split_rows(table: pa.Table, max_rows: int) -> list[pa.Table]:
    """Consecutive slices of at most ``max_rows`` rows (each becomes one SST)."""
    return [table.slice(i, max_rows) for i in range(0, table.num_rows, max_rows)]


class PencillerClerk:
    """Plain-object logic of the merge worker; the Bookie starts it as a Ray actor."""

    def __init__(self, store: ObjectStore, options: Options, clock: Clock, ledger):
        self.store = store
        self.options = options
        self.clock = clock  # expired entries are dropped at the basement by it
        #: The Bookie, which hands on the merge calls to the Penciller in its process.
        self.ledger = ledger
        self.host = ClerkHost(store, 8 << 20)  # merges read whole files: keep little cached
        self.stopped = False
        self.counters = dict(NO_MERGES)
        self.last_error: str | None = None

    async def run(self, wait_s: float = MERGE_POLL_S) -> None:
        """Ask the Penciller for merges until stopped, each ask a long poll of ``wait_s``. A
        merge that fails (an object-store error that outlasted its retries, a commit the
        Penciller refused) is counted and chosen again later; only a store that is gone,
        closing or fenced stops the clerk."""
        while not self.stopped:
            try:
                job = await call(self.ledger.merge_work, wait_s)
            except Exception as exc:  # the store is gone or fenced: stop
                self.last_error = repr(exc)
                return
            if job is None:
                continue
            try:
                outputs = await self.merge(job)
            except Exception as exc:
                await call(self.ledger.merge_failed, job, repr(exc))
                await self._failed(exc)
                continue
            try:
                await call(self.ledger.merge_done, job, outputs)
            except (FencedError, StoreClosedError):
                return
            except Exception as exc:  # the Penciller counted it and freed the job
                await self._failed(exc)

    async def _failed(self, exc: Exception) -> None:
        self.counters["failures"] += 1
        self.last_error = repr(exc)
        await asyncio.sleep(FAILURE_PAUSE_S)

    async def merge(self, job: MergeJob) -> tuple[SstInfo, ...]:
        """Do one merge; returns the new files of the target level."""
        if job.move_only:
            self.counters["moves"] += 1
            return job.sources
        started = time.monotonic()
        tables = [await self.host.sst(f).read_table() for f in job.inputs]
        tables = [t if (owns := job.foreign_owns(f)) is None or not t.num_rows
                  else t.filter(owns.mask(t.column("key").to_pylist()))
                  for f, t in zip(job.inputs, tables)]  # a split shard's inherited files
        merged = await asyncio.to_thread(merge_tables, tables, job.basement, self.clock())
        outputs = []
        for part in split_rows(merged, self.options.ledger.sst_max_keys):
            info = await write_sst(self.store, part, self.options)
            outputs.append(info)
            self.counters["files_written"] += 1
            self.counters["bytes_written"] += info.size
        for f in job.inputs:  # this process will not read them again
            self.host.forget(f.name)
        self.counters["merges"] += 1
        self.counters["rows_in"] += sum(t.num_rows for t in tables)
        self.counters["rows_out"] += merged.num_rows
        self.counters["bytes_read"] += sum(f.size for f in job.inputs)
        self.counters["seconds"] += time.monotonic() - started
        return tuple(outputs)

    def stats(self) -> dict:
        return {**self.counters, "last_error": self.last_error,
                "io": self.store.stats.as_dict(), "process": process_stats()}

    def stop(self) -> None:
        self.stopped = True
