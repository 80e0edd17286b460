"""The Penciller: owns the Ledger (leveled's ``leveled_penciller``).

The Bookie pushes batches of Ledger changes, in SQN order, into the Penciller's L0 memory. Once
L0 memory holds ``l0_max_keys`` keys, or its oldest change is ``l0_max_age_s`` old, it is
sorted, written as an L0 SST and added to the manifest with the new persisted SQN. The Bookie
long-polls :meth:`Penciller.wait_view` to learn of new files, so it can drop the changes they
hold from its own cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from typing import Protocol

import pyarrow as pa

from ..admin.gc import check_publishable, named_at
from ..clock import Clock
from ..codec import LEDGER_SCHEMA
from ..errors import ObjectStoreError, StoreClosedError
from ..files import sst as sfmt
from ..files.clerk import write_sst
from ..files.store import ObjectStore
from ..manifest import checkpoints
from ..manifest.ingest import ingest
from ..manifest.levels import MergeJob, apply_merge, choose_work, inherited_work, merge_due
from ..manifest.store import Versioned
from ..manifest.transitions import add_l0, persist_ledger_sqn, save_tree
from ..options import Options
from ..read.views import LedgerFiles
from .owner import Owner
from .remote import process_stats, wait_set
from .tree_keeper import TreeKeeper

log = logging.getLogger(__name__)

#: Stands for a merge while a bulk write is installed, so that no merge starts.
_INGESTING = MergeJob(0, (), (), False)


class JournalCatalog(Protocol):
    """What the Penciller needs of the Journal (the Inker)."""

    async def catalog(self) -> None:
        """Record every journal file written so far in the manifest."""


class Penciller(Owner):
    """Plain-object logic of the Penciller; the Bookie starts it as a Ray actor."""

    def __init__(self, store: ObjectStore, options: Options, clock: Clock, epoch: int,
                 latest: Versioned, journal: JournalCatalog | None = None):
        super().__init__(store, options, clock, epoch, latest)
        self.l0_memory: list[pa.RecordBatch] = []
        self.l0_keys = 0
        self.pushed_sqn = latest.manifest.ledger_sqn
        self._l0_since: float | None = None  # when L0 memory last went from empty to not
        #: The merge in flight's upload (:meth:`begin_upload`) and its start, by the clock.
        self._merge_upload: tuple[object, float] = (None, 0.0)
        self._flush_task: asyncio.Task | None = None
        self._flush_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._merged = asyncio.Event()
        self.closing = False
        self.error: BaseException | None = None
        self.last_error: str | None = None
        self.merging: MergeJob | None = None
        #: The Inker beside it, asked to record the journal in the manifest before each
        #: persisted SQN moves.
        self.journal = journal
        self.rng = random.Random()
        self.tree = TreeKeeper(store, options, self.files)
        self.counters = {"pushes": 0, "l0_flushes": 0, "sst_bytes": 0, "flush_retries": 0,
                         "merges": 0, "merge_failures": 0, "ingests": 0, "commit_retries": 0,
                         "age_flushes": 0, "late_ingests": 0}

    def files(self) -> LedgerFiles:
        mid, m = self.latest
        return LedgerFiles.of(mid, m)

    async def push(self, batch: pa.RecordBatch, max_sqn: int) -> int:
        """Add Ledger changes (every SQN up to ``max_sqn``) to L0 memory; returns L0 key count."""
        if self.error is not None:
            raise self.error
        if batch.num_rows:
            self.l0_memory.append(batch)
            self.l0_keys += batch.num_rows
            self._l0_changed()
        self.pushed_sqn = max(self.pushed_sqn, max_sqn)
        self.counters["pushes"] += 1
        if self.l0_keys >= self.options.ledger.l0_max_keys:
            self._start_flush()
        return self.l0_keys

    def _l0_changed(self) -> None:
        """Track the age of L0 memory: once its oldest change is ``l0_max_age_s`` old, it is
        flushed whatever its size."""
        if not self.l0_keys:
            self._l0_since = None
        elif self._l0_since is None:
            since = self._l0_since = time.monotonic()
            self.tasks.start(self._flush_when_old(since), "L0 age flush")

    async def _flush_when_old(self, since: float) -> None:
        await asyncio.sleep(self.options.ledger.l0_max_age_s)
        if self._l0_since == since and not self.closing:
            self.counters["age_flushes"] += 1
            self._start_flush(force=True)

    def _start_flush(self, force: bool = False) -> None:
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = self.tasks.start(self._flush_background(force), "L0 flush")

    async def persist(self) -> None:
        """Write L0 memory to an L0 SST now, if it holds anything (journal compaction can
        only drop entries the Ledger's files hold)."""
        if self.l0_keys:
            await self.flush()

    async def _flush_background(self, force: bool = False) -> None:
        """Flush L0 memory until it is under its limit, or once when ``force``d (pushes that
        arrive during a flush start none of their own). Object-store failures are retried
        with backoff: the changes stay in L0 memory, and in the Journal, until a flush
        succeeds. Fencing is final."""
        delay = 0.05
        while self.l0_keys >= self.options.ledger.l0_max_keys or (force and self.l0_keys):
            l0_files = len(self.latest.manifest.levels[0])
            if l0_files >= self.options.ledger.max_l0_files and not self.closing:
                # Merges are behind: keep the changes in memory; the Bookie sees the backlog
                # grow and slows writers down. (At close, no merge will come: flush anyway.)
                await self._merged.wait()
                continue
            try:
                await self.flush()
                self.last_error = None
                delay, force = 0.05, False
            except ObjectStoreError as exc:
                self.last_error = repr(exc)
                self.counters["flush_retries"] += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except BaseException as exc:  # surfaced to the Bookie on its next push
                self.error = exc
                return

    async def flush(self) -> None:
        """Write all of L0 memory to one L0 SST and commit it to the manifest."""
        async with self._flush_lock:
            batches, upto = list(self.l0_memory), self.pushed_sqn
            if upto > self.latest.manifest.ledger_sqn and self.journal is not None:
                # Every manifest version must record the journal files that hold the values of
                # the Ledger it describes (checkpoints and clones read exactly one version).
                await self.journal.catalog()
            if not batches:
                if upto > self.latest.manifest.ledger_sqn:
                    await self.commit(persist_ledger_sqn, upto)
                    self._notify()
                return
            token, started = self.begin_upload()
            try:
                table = await asyncio.to_thread(self._sorted, batches)
                hashes = await self.tree.key_hashes(table)
                info, change = await asyncio.gather(
                    write_sst(self.store, table, self.options, hashes),
                    self.tree.change_of(table, self.files(), hashes))
                # An upload GC may already count as an orphan is not published: the flush is
                # redone.
                check_publishable(started, self.options, self.clock())
                await self.commit(add_l0, info, upto)
            finally:
                self.end_upload(token)
            self.tree.apply(change)
            # Only now may the flushed batches leave memory: the manifest holds them.
            del self.l0_memory[: len(batches)]
            self.l0_keys -= sum(b.num_rows for b in batches)
            self._l0_since = None  # what is left arrived during the flush: young
            self._l0_changed()
            self.counters["l0_flushes"] += 1
            self.counters["sst_bytes"] += info.size
            self._notify()

    @staticmethod
    def _sorted(batches: list[pa.RecordBatch]) -> pa.Table:
        return sfmt.sort_and_dedupe(pa.Table.from_batches(batches, schema=LEDGER_SCHEMA))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_view(self, known_version: int, timeout: float = 30.0) -> LedgerFiles | None:
        """The Ledger's files once their version differs from ``known_version`` (a long poll);
        ``None`` if nothing changed within ``timeout`` seconds."""
        if self.latest.id == known_version and not await wait_set(self._changed, timeout):
            return None
        return self.files() if self.latest.id != known_version else None

    # -- merges (done by the Penciller's clerk) --

    def merge_due(self) -> bool:
        """Whether a merge is due (see :func:`~leveled_ray.manifest.levels.merge_due`)."""
        return merge_due(self.latest.manifest.levels, self.files().owns)

    def merge_work(self) -> MergeJob | None:
        """The next merge for the clerk, or ``None`` (also while one is in flight)."""
        if self.error is not None:
            raise self.error
        if self.merging is not None:
            return None
        levels, owns = self.latest.manifest.levels, self.files().owns
        job = choose_work(levels, self.rng)
        if owns is not None:  # a split shard's child: its inherited files go in time
            job = inherited_work(levels, owns) if job is None else dataclasses.replace(
                job, owns=owns)
        self.merging = job
        if job is not None:
            self._merge_upload = self.begin_upload()  # its outputs are written after this
        return self.merging

    async def wait_merge_work(self, wait_s: float) -> MergeJob | None:
        """:meth:`merge_work`, as a long poll: with none due, wait up to ``wait_s`` for the
        levels to change (a flush, a merge's or a bulk install's commit: nothing else makes
        work) and look again. An idle clerk so costs one call per ``wait_s``, and a merge
        that comes due starts at once. ``None`` once the Penciller closes."""
        job = self.merge_work()
        if job is None and not self.closing and await wait_set(self._changed, wait_s):
            job = None if self.closing else self.merge_work()
        return job

    async def merge_done(self, job: MergeJob, outputs: tuple) -> int:
        """Commit a finished merge; returns the manifest version that removed its inputs."""
        try:
            check_publishable(self._merge_upload[1], self.options, self.clock())
            mid, _ = await self.commit(apply_merge, job, outputs)
        except BaseException as exc:
            self.counters["merge_failures"] += 1
            self.last_error = repr(exc)
            raise
        finally:
            self.merging = None
            self.end_upload(self._merge_upload[0])
        self.counters["merges"] += 1
        self._notify()
        self._merged.set()
        self._merged = asyncio.Event()
        return mid

    def merge_failed(self, job: MergeJob, error: str) -> None:
        self.merging = None
        self.end_upload(self._merge_upload[0])
        self.counters["merge_failures"] += 1
        self.last_error = error
        self._merged.set()
        self._merged = asyncio.Event()

    # -- bulk writes --

    async def ingest(self, journal: tuple, ssts: tuple, upto: int,
                     mark: tuple[str, int] | None = None,
                     held: bool = False) -> tuple[LedgerFiles, bool]:
        """Install a bulk write's files (see :mod:`leveled_ray.manifest.ingest`) once L0
        memory, holding every change up to ``upto``, is persisted. No merge runs meanwhile:
        the files are placed by the levels as they are. Returns the Ledger files, and whether
        the write's files are in the store (not when ``mark`` says it was applied before).
        Files ``held`` by a prepared part are installed however old they are: GC keeps what
        a part names (they were young enough when it was prepared)."""
        if self.error is not None:
            raise self.error
        while self.merging is not None:
            if self.closing:  # close set the event for good: waiting again would spin
                raise StoreClosedError("the store is closing: the bulk write was not installed")
            await self._merged.wait()
        self.merging = _INGESTING
        try:
            self.pushed_sqn = max(self.pushed_sqn, upto)
            await self.flush()
            try:
                check_publishable(named_at(f.name for f in journal + ssts), self.options,
                                  time.time())  # named in wall time by the bulk writers
            except ObjectStoreError:
                if not held:
                    raise
                self.counters["late_ingests"] += 1
            before = self.latest.id
            await self.commit(ingest, journal, ssts, mark)
            if self.latest.id != before:  # its files joined the Ledger as they are: fold again
                self.tree.rebuild()
            self.pushed_sqn = max(self.pushed_sqn, self.latest.manifest.ledger_sqn)
        finally:
            self.merging = None
            self._merged.set()
            self._merged = asyncio.Event()
        self.counters["ingests"] += 1
        self._notify()
        names = {j.name for j in self.latest.manifest.journal}
        return self.files(), all(j.name in names for j in journal)

    def stats(self) -> dict:
        levels = self.latest.manifest.levels
        return {
            **self.counters,
            **self.tree.stats(),
            "l0_memory_keys": self.l0_keys,
            "l0_files": len(levels[0]),
            "level_files": [len(level) for level in levels],
            "level_bytes": [sum(f.size for f in level) for level in levels],
            "checkpoints": len(checkpoints.live(self.latest.manifest, self.clock())),
            "ledger_sqn": self.latest.manifest.ledger_sqn,
            "merging": self.merging is not None,
            "snapshots": len(self.snapshots),
            "manifest_id": self.latest.id,
            "last_error": self.last_error or self.tasks.last_error,
            "background_errors": self.tasks.errors,
            "io": self.store.stats.as_dict(),
            "process": process_stats(),
        }

    async def close(self) -> None:
        """Persist L0 memory so that a clean restart replays nothing."""
        self.closing = True
        self._merged.set()  # a flush waiting for merges goes ahead
        self._notify()  # and a clerk's long poll for work returns
        if self._flush_task is not None:
            await asyncio.gather(self._flush_task, return_exceptions=True)
        await self.flush()
        await self._save_tree()

    async def _save_tree(self) -> None:
        """Save the kept tree of the Ledger as closed, so that the next open need not fold
        it. A failure only costs that fold."""
        self.tree.close()
        token, _ = self.begin_upload()  # GC keeps it until the manifest names it
        try:
            saved = await self.tree.save(self.latest.manifest)
            if saved is not None:
                await self.commit(save_tree, saved)
        except Exception:  # noqa: BLE001 - the close goes on; the next open folds
            self.tree.counters["tree_failures"] += 1
            log.warning("the kept tree could not be saved", exc_info=True)
        finally:
            self.end_upload(token)
