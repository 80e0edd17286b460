"""The Inker: owns the Journal (leveled's ``leveled_inker``).

Each group commit from the Bookie becomes one journal file in the next journal *slot*, claimed
with put-if-absent. Slots are consecutive and claimed one at a time, which makes them the
writer-fencing sequence of SlateDB's manifest RFC: a new writer writes an empty *fence* file into
the first free slot, and an older writer's next claim collides with it and fails with
``FencedError`` before anything of it becomes visible. Fences are never deleted, so a fenced
writer can never claim a slot again (SlateDB #352).

New files are recorded in the manifest in batches (``catalog_files`` / ``catalog_s``); recovery
lists the slots after the last recorded one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..admin.gc import check_publishable
from ..clock import Clock
from ..codec import LedgerRows
from ..codec.head_only import SETTING as HEAD_ONLY
from ..codec.owned import SETTING as OWNS
from ..codec.owned import Owns
from ..errors import CorruptObjectError, FencedError, ObjectStoreError, StoreClosedError
from ..files import journal as jfmt
from ..files.journal_slots import UnsettledWrite, write_fence
from ..files.names import journal_slot_name
from ..files.outcomes import Created
from ..files.routed import is_foreign
from ..files.store import ObjectStore
from ..manifest.history import protected_sqn, window_sqn
from ..manifest.journal_compaction import small_run
from ..manifest.store import Versioned
from ..manifest.transitions import catalog_journal, replace_journal
from ..options import Options
from .iclerk import CompactionResult
from .owner import Owner
from .remote import call, wait_set

#: Compactions whose removed files :meth:`Inker.wait_journal` can still report: one
#: compaction may commit several rewrites before the Bookie's view catches up.
REMOVALS_KEPT = 1024


class JournalView(NamedTuple):
    """The journal files as of a compaction: its manifest version, the data files, the
    names of the files replaced since the version the asker knew, and the SQN history begins
    after (see :mod:`leveled_ray.manifest.history`)."""

    version: int
    files: list[jfmt.JournalInfo]
    removed: list[str]
    history_sqn: int = 0


class Inker(Owner):
    """The Inker's logic, a plain object hosted in the Bookie's process."""

    def __init__(self, store: ObjectStore, options: Options, clock: Clock, epoch: int,
                 latest: Versioned):
        super().__init__(store, options, clock, epoch, latest)
        self.files: list[jfmt.JournalInfo] = list(latest.manifest.journal)
        self.uncatalogued: list[jfmt.JournalInfo] = []
        self.next_slot = latest.manifest.journal_next_slot
        self.head_only = latest.manifest.setting(HEAD_ONLY) is not None
        #: A split shard's run of partitions: its inherited journal files hold other keys.
        self.owns = Owns.decode(latest.manifest.setting(OWNS))
        self.fenced: FencedError | None = None
        self.unsettled: UnsettledWrite | None = None
        self.closed = False
        self._write_lock = asyncio.Lock()
        self._catalog_lock = asyncio.Lock()
        self._oldest_uncatalogued = 0.0
        self.last_error: str | None = None
        #: Gives the Inker's clerk (journal compaction), started on first use; from the Bookie.
        self.clerk: Callable[[], object] | None = None
        self._compaction: asyncio.Task | None = None
        #: A compaction asked for while one ran (its ``small_only``), run once that one ends:
        #: the running one may have decided before what the request was for (a dropped lease,
        #: a persisted Ledger).
        self._asked_again: bool | None = None
        self._schedule: asyncio.Task | None = None
        self._journal_changed = asyncio.Event()
        #: ``(manifest version, names)`` of the files each recent compaction removed.
        self.removals: deque[tuple[int, list[str]]] = deque(maxlen=REMOVALS_KEPT)
        self.journal_version = latest.id  # manifest version of the latest compaction
        #: When each journal file was written, as far as this process knows: files from
        #: before it started count as written at its start (so history keeps them longer,
        #: never shorter); a rewritten file takes the newest time of the files it replaced.
        self.started_at = clock()
        self.written_at: dict[str, float] = {}
        self.window_sqn: int | None = None  # where the history_s window began, last compaction
        self.counters = {"groups": 0, "entries": 0, "bytes": 0, "fence_slot": -1,
                         "catalog_failures": 0, "compactions": 0, "compaction_failures": 0,
                         "sealed_slots": 0, "commit_retries": 0}

    # -- opening: fence older writers and find the uncatalogued tail --

    async def open(self) -> dict:
        """Fence every older writer; returns the journal files and the highest SQN."""
        fence, tail = await write_fence(self.store, self.epoch,
                                        self.latest.manifest.journal_next_slot)
        self.counters["fence_slot"] = fence.slot
        self.next_slot = fence.slot + 1
        await self._catalog(tail + [fence])
        return {"files": self.data_files(), "max_sqn": self.max_sqn()}

    # -- writing --

    async def append(self, columns: list, values: list) -> jfmt.JournalInfo:
        """Write one group as the next journal file; returns once it is durable.

        Per caller in the group: its records as columns ``(first_sqn, last_modified, ops, keys,
        indexes, expiries, extras, batch)`` and a ``ValueBatch`` of values.

        The slot's create settles its own outcome (see ``ObjectStore.create_or_seal_async``).
        If it was sealed, nothing of the group was written: a definite ``ObjectStoreError``.
        If even the seal's outcome is unknown (the store stayed unreachable), the error is
        indefinite and the slot stays *unsettled*: :meth:`settle` must settle it before the
        next append, which until then fails definitely, having sent nothing.
        """
        self._check_writable()
        records: list = []
        for (first, lm, ops, lkeys, indexes, expiries, extras, tag), batch in zip(columns,
                                                                                   values):
            records += zip(range(first, first + len(ops)), ops, lkeys, await batch.resolve(),
                           indexes, expiries, extras, itertools.repeat(lm),
                           itertools.repeat(tag))
        async with self._write_lock:
            if self.unsettled is not None:
                raise ObjectStoreError(
                    f"journal slot {self.unsettled.slot} is not settled yet (the object store "
                    "did not answer): nothing was written", definite=True)
            slot = self.next_slot
            name = journal_slot_name(slot)
            args = (name, self.epoch, slot, records)
            if len(records) <= jfmt.SMALL_RECORDS:  # cheaper than a hop to a thread and back
                data, info = jfmt.build_journal(*args, codec=self.codec)
            else:
                data, info = await asyncio.to_thread(jfmt.build_journal, *args, codec=self.codec)
            await self._settle(UnsettledWrite(slot, data, info, self.epoch))
        self._maybe_catalog()
        return info

    async def settle(self) -> jfmt.JournalInfo | None:
        """Settle the slot an append left unsettled: resend its file, else seal the slot.
        Returns the group's journal file if it was written (it is durable now), or ``None``
        if nothing was unsettled. Raises a definite ``ObjectStoreError`` if the slot was
        sealed (the group was not written, and never will be), an indefinite one while the
        store still does not answer."""
        async with self._write_lock:
            pending = self.unsettled
            if pending is None:
                return None
            await self._settle(pending, again=True)
        self._maybe_catalog()
        return pending.info

    async def _settle(self, write: UnsettledWrite, *, again: bool = False) -> None:
        """Create the slot's file, or seal the slot (then raise a definite error). A failure
        leaves the write unsettled if it may have landed: in an earlier round (``again``), or
        in this one (an indefinite error)."""
        self.unsettled = None
        try:
            created = await self.store.create_or_seal_async(
                write.info.name, write.data, write.seal, ident=jfmt.IDENTITY_BYTES)
        except ObjectStoreError as exc:
            if exc.definite and not again:
                raise  # no attempt reached the store: the slot is still free
            self.unsettled = write
            raise ObjectStoreError(str(exc), definite=False, path=exc.path) from None
        if created is Created.THEIRS:
            await self._resolve_collision(write.slot)
        self.next_slot = write.slot + 1
        if created is Created.SEALED:
            self._written(write.fence[1])
            self.counters["sealed_slots"] += 1
            raise ObjectStoreError(
                f"the journal write to slot {write.slot} had an unknown outcome, so the slot "
                "was sealed: nothing of it was written", definite=True)
        self._written(write.info)

    def _written(self, info: jfmt.JournalInfo) -> None:
        self.files.append(info)
        self.written_at[info.name] = self.clock()
        self.uncatalogued.append(info)
        if len(self.uncatalogued) == 1:
            self._oldest_uncatalogued = time.monotonic()
        if info.kind == jfmt.KIND_DATA:
            self.counters["groups"] += 1
            self.counters["entries"] += info.entries
            self.counters["bytes"] += info.size

    def _check_writable(self) -> None:
        if self.closed:
            raise StoreClosedError("the Inker is closed")
        if self.fenced is not None:
            raise self.fenced.again()

    def _maybe_catalog(self) -> None:
        if self.uncatalogued and (
                len(self.uncatalogued) >= self.options.journal.catalog_files
                or time.monotonic() - self._oldest_uncatalogued >= self.options.journal.catalog_s):
            self.tasks.start(self._catalog_background(), "catalog")

    async def _catalog_background(self) -> None:
        # A failed catalog update is retried with the next append (or at close).
        try:
            await self.catalog()
        except FencedError as exc:
            self.fenced = exc
            return
        except ObjectStoreError as exc:
            self.counters["catalog_failures"] += 1
            self.last_error = repr(exc)
            return
        if (self.clerk is not None and not self.closed and self.fenced is None
                and self.small_files_due()):
            self.compact(small_only=True)  # "busy" if one runs: it merges these too

    async def _resolve_collision(self, slot: int) -> None:
        """Another writer's file holds our slot: a newer writer's (we are fenced), or, which
        should never be, a different file of our own epoch."""
        name = journal_slot_name(slot)
        head = await self.store.get_range_async(name, 0, jfmt.HEADER_SIZE)
        epoch, _, _ = jfmt.parse_header(head, name)
        if epoch > self.epoch:
            self.fenced = FencedError(f"writer epoch {self.epoch} was fenced by epoch {epoch}",
                                      epoch=self.epoch, current_epoch=epoch)
            raise self.fenced
        raise CorruptObjectError(name, 0, f"slot {slot} holds another file of epoch {epoch}")

    # -- the manifest --

    async def catalog(self) -> None:
        """Record the uncatalogued journal files in the manifest."""
        async with self._catalog_lock:
            if self.uncatalogued:
                await self._catalog(list(self.uncatalogued))

    async def _catalog(self, files: list[jfmt.JournalInfo]) -> None:
        next_slot = max([self.next_slot] + [f.slot + 1 for f in files])
        await self.commit(catalog_journal, tuple(files), next_slot)
        names = {f.name for f in files}
        self.uncatalogued = [f for f in self.uncatalogued if f.name not in names]
        self.adopt(files)

    def adopt(self, files) -> None:
        """Add journal files the manifest now records (newly catalogued ones, or a bulk
        write's, which the Penciller installed). A file adopted without a write time here
        (a bulk write's) counts as written now for ``history_s``: else a Bookie older than
        the window would count it old, and the window would protect nothing below it."""
        known = {f.name for f in self.files}
        new = [f for f in files if f.name not in known]
        now = self.clock()
        for f in new:
            self.written_at.setdefault(f.name, now)
        self.files.extend(new)
        self.files.sort(key=lambda f: (f.slot, f.min_sqn))

    # -- reading --

    def data_files(self) -> list[jfmt.JournalInfo]:
        return [f for f in self.files if f.kind == jfmt.KIND_DATA and f.entries]

    def max_sqn(self) -> int:
        return max((f.max_sqn for f in self.data_files()), default=0)

    async def replay(self, after_sqn: int, cursor: int = 0) -> tuple[object, int, int | None]:
        """Ledger changes above ``after_sqn`` from one journal file, in SQN order.

        Returns ``(ledger rows as an Arrow batch, max SQN, next cursor or None when done)``.
        Call again with the cursor until it is ``None``; memory stays bounded by one file.
        """
        files = sorted((f for f in self.data_files() if f.max_sqn > after_sqn),
                       key=lambda f: f.min_sqn)
        if cursor >= len(files):
            return LedgerRows().to_batch(), 0, None
        info = files[cursor]
        data = await self.store.get_async(info.name)
        rows = LedgerRows()
        top = 0
        owns = self.owns if is_foreign(info.name) else None  # a split shard's inherited file
        for rec in jfmt.iter_records(data, info.name, after_sqn):
            if owns is None or owns.owns(rec.lkey):
                rows.add_record(rec)
            top = rec.sqn
        nxt = cursor + 1 if cursor + 1 < len(files) else None
        return rows.to_batch(), top, nxt

    # -- journal compaction (done by the Inker's clerk) --

    def attach_clerk(self, clerk: Callable[[], object]) -> None:
        """Take the compaction worker (``clerk()`` gives its handle, starting it the first
        time), and start the schedule if one is set."""
        self.clerk = clerk
        interval = self.options.journal.compaction_interval_s
        if interval > 0 and self._schedule is None:
            self._schedule = self.tasks.start(self._scheduled(interval), "compaction schedule")

    async def _scheduled(self, interval: float) -> None:
        while not self.closed and self.fenced is None:
            await asyncio.sleep(interval)
            if not self.closed:
                self.compact()

    def compact(self, *, small_only: bool = False) -> str:
        """Start a journal compaction: ``"started"``, or ``"busy"`` if one is running, in
        which case another runs once it ends. A failed compaction is counted
        (``compaction_failures``) and tried again next time. With ``small_only``, it only
        merges runs of small files (started as they are catalogued, see
        :meth:`small_files_due`)."""
        self._check_writable()
        if self._compaction is not None and not self._compaction.done():
            again = self._asked_again
            self._asked_again = small_only if again is None else again and small_only
            return "busy"
        self._asked_again = None
        self._compaction = self.tasks.start(self._compactions(small_only), "journal compaction")
        return "started"

    async def _compactions(self, small_only: bool) -> CompactionResult:
        """One compaction, then one more while any was asked for as it ran."""
        result = CompactionResult([])
        while True:
            result += await self._compact(small_only)
            if self._asked_again is None or self.closed or self.fenced is not None:
                return result
            small_only, self._asked_again = self._asked_again, None

    async def wait_compaction(self) -> CompactionResult | None:
        """Wait for the running compaction (if any) and those asked for while it ran; returns
        their result."""
        if self._compaction is None:
            return None
        return await asyncio.shield(self._compaction)

    def _catalogued(self) -> list[jfmt.JournalInfo]:
        """The data files compaction may rewrite, oldest first (consecutive: a rewrite's files
        must hold a run of SQNs no other file holds): recorded in the manifest, and not the
        newest data file, unless a clone shares it (this store never wrote it)."""
        catalogued = {f.name for f in self.latest.manifest.journal}
        data = sorted(self.data_files(), key=lambda f: f.min_sqn)
        if data and not is_foreign(data[-1].name):
            data = data[:-1]
        return [f for f in data if f.name in catalogued]

    def candidates(self, persisted_sqn: int) -> list[jfmt.JournalInfo]:
        """The files scored compaction may rewrite: wholly at or below the Ledger's persisted
        SQN, as only those may have replaced entries to drop."""
        return [f for f in self._catalogued() if f.max_sqn <= persisted_sqn]

    def _inherited(self, persisted_sqn: int) -> list[jfmt.JournalInfo]:
        """A split shard's child: a run of journal files from its oldest inherited one (the
        shard it was split from wrote it), however live: rewritten without the other child's
        keys, so that in time it shares no file with that shard."""
        if self.owns is None:
            return []
        found = self.candidates(persisted_sqn)
        first = next((i for i, f in enumerate(found) if is_foreign(f.name)), None)
        return [] if first is None else found[first:first + self.options.journal.max_run_length]

    def _small_run(self) -> list[jfmt.JournalInfo]:
        """The oldest run of small files due for a merge (see :func:`small_run`), or none. A
        merge keeps every entry above the persisted SQN, so it need not wait for the Ledger."""
        files, o = self._catalogued(), self.options
        run = small_run([f.size for f in files], o.journal.small_bytes, o.journal.small_files,
                        o.journal.max_file_bytes)
        return [] if run is None else files[run[0] : run[0] + run[1]]

    def small_files_due(self) -> bool:
        """Whether enough small journal files are catalogued to merge a run."""
        return not self.head_only and bool(self._small_run())

    async def _compact(self, small_only: bool) -> CompactionResult:
        try:
            await self.catalog()
            latest = await self.manifests.latest(self.latest)
            persisted = latest.manifest.ledger_sqn  # the Penciller moves it: read the newest
            now = self.clock()
            window = window_sqn([(self.written_at.get(f.name, self.started_at), f.max_sqn)
                                 for f in self.data_files()], now, self.options.history_s)
            protect = protected_sqn(latest.manifest, now, window)
            self.window_sqn = window
            if self.head_only:  # trim_journal: the Ledger holds everything, values included
                trimmed = [f for f in self.candidates(persisted)
                           if protect is None or f.max_sqn <= protect]
                return await self._replace(CompactionResult(
                    [], [f.name for f in trimmed], [], max((f.max_sqn for f in trimmed),
                                                           default=0)))
            result = CompactionResult([])
            # Runs of small files first, oldest first, while each rewrite leaves fewer files.
            while run := self._small_run():
                merged = await self._uploaded(lambda: call(
                    self.clerk().rewrite, run, persisted, self.epoch, protect, self.owns))
                result += merged
                if len(merged.added) >= len(merged.removed):
                    break
            if not small_only:
                result += await self._uploaded(lambda: call(
                    self.clerk().compact, self.candidates(persisted), persisted, self.epoch,
                    protect, self.owns))
            if not small_only and (inherited := self._inherited(persisted)):
                # a split shard's child: its inherited files go
                result += await self._uploaded(lambda: call(
                    self.clerk().rewrite, inherited, persisted, self.epoch, protect,
                    self.owns))
            return result
        except Exception as exc:
            self.counters["compaction_failures"] += 1
            self.last_error = repr(exc)
            if isinstance(exc, FencedError):
                self.fenced = exc
            raise

    async def _uploaded(self, rewrite: Callable[[], Awaitable[CompactionResult]]
                        ) -> CompactionResult:
        """Run a clerk's rewrite, whose files are written after this begins, and commit it."""
        token, started = self.begin_upload()
        try:
            return await self._replace(await rewrite(), started)
        finally:
            self.end_upload(token)

    async def _replace(self, result: CompactionResult,
                       started: float | None = None) -> CompactionResult:
        """Commit a compaction's result: its files (written after ``started``, by the clock)
        replace the removed ones."""
        if result.removed:
            if started is not None:
                check_publishable(started, self.options, self.clock())
            await self.commit(replace_journal, tuple(result.removed), tuple(result.added),
                              result.history_sqn, self.clock())
            gone = set(result.removed)
            newest = max(self.written_at.pop(name, self.started_at) for name in gone)
            for info in result.added:
                self.written_at[info.name] = newest
            self.files = sorted([f for f in self.files if f.name not in gone]
                                + list(result.added), key=lambda f: (f.min_sqn, f.slot))
            self.journal_version = self.latest.id
            self.removals.append((self.journal_version, list(result.removed)))
            self.counters["compactions"] += 1
            self._journal_changed.set()
            self._journal_changed = asyncio.Event()
        return result

    async def wait_journal(self, known_version: int,
                           timeout: float = 30.0) -> JournalView | None:
        """The journal files once a compaction newer than ``known_version`` has been
        committed (a long poll); ``None`` on timeout."""
        if self.journal_version <= known_version and not await wait_set(
                self._journal_changed, timeout):
            return None
        removed = [name for version, names in self.removals if version > known_version
                   for name in names]
        return JournalView(self.journal_version, self.data_files(), removed,
                           self.latest.manifest.history_sqn)

    def stats(self) -> dict:
        return {
            **self.counters,
            "epoch": self.epoch,
            "journal_files": len(self.data_files()),
            "uncatalogued": len(self.uncatalogued),
            "next_slot": self.next_slot,
            "manifest_id": self.latest.id,
            "compacting": self._compaction is not None and not self._compaction.done(),
            "snapshots": len(self.snapshots),
            "last_error": self.last_error or self.tasks.last_error,
            "background_errors": self.tasks.errors,
            "io": self.store.stats.as_dict(),
        }

    async def close(self) -> None:
        if not self.closed:
            if self._schedule is not None:
                self._schedule.cancel()
            if self._compaction is not None:
                await asyncio.gather(self._compaction, return_exceptions=True)
            if self.fenced is None and self.unsettled is not None:
                with contextlib.suppress(ObjectStoreError):
                    await self.settle()  # a write whose outcome is unknown: settle it
            if self.fenced is None:
                await self.catalog()
            self.closed = True
