"""The Bookie's points in time and history: snapshots, checkpoints, the change feed's long
poll and history leases."""

from __future__ import annotations

import pyarrow as pa

from ..admin import checkpoints, history_leases
from ..codec import LEDGER_SCHEMA
from ..files.names import ulid
from ..manifest.model import Checkpoint, HistoryLease
from ..read.kept_trees import with_newer


class PointsInTime:
    """Mixed into :class:`~.bookie.Bookie`, whose state these calls use."""

    # -- snapshots and checkpoints -------------------------------------------------------------

    async def snapshot(self, timeout_s: float, values: bool = True) -> dict:
        """Take a snapshot: this process's view of the store (Ledger files, journal files, and
        the batches of changes not yet in those files), registered with the Penciller (and the
        Inker, when ``values``) so that no file it reads is deleted before it is released or
        expires. Costs references to immutable batches, not a copy of anything."""
        self._check_readable()
        await self.lease.ensure_fresh()  # GC keeps what the snapshot reads only under it
        values = values and not self.head_only  # head_only values live in the Ledger
        view, snapshot_id = self.view.point_in_time(self.writes.durable_sqn), f"snap-{ulid()}"
        journal_version = self._journal_view_version()  # of the view just frozen
        slots_below = self.view.journal.next_slot()
        # Pin both versions here until the owners know the snapshot: the reaper must not delete
        # a file of this view in between.
        with self.view.pinned() as (ledger_version, _):
            self.penciller.register_snapshot(snapshot_id, timeout_s, ledger_version)
            try:
                if values:
                    self.inker.register_snapshot(snapshot_id, timeout_s, journal_version)
            except BaseException:
                self.penciller.release_snapshot(snapshot_id)
                raise
            self.lease.register(snapshot_id, (ledger_version, journal_version, slots_below),
                                timeout_s)
        return {"id": snapshot_id, "view": view, "expires_at": self.clock() + timeout_s,
                "values": values}

    async def kept_tree(self, size: str) -> bytes | None:
        """The store's tictac tree now, of ``size``, encoded: the Penciller's kept tree of its
        files, changed by the changes not yet in them (this process's cache). ``None`` where a
        compare must fold (see :meth:`~.tree_keeper.TreeKeeper.current`)."""
        self._check_readable()
        tree = self.penciller.tree.current(size)
        if tree is None:
            return None
        # In one step: the files, and every change not yet in them (the cache holds what the
        # Bookie's view lacks, a superset).
        files = self.penciller.files()
        newer = pa.Table.from_batches(self.cache.overlay_batches(), LEDGER_SCHEMA)
        found = await with_newer(tree, self.view.host, files, newer, size)
        return None if found is None else found.encode()

    async def release_snapshot(self, snapshot_id: str) -> None:
        """Release a snapshot: the files only it needed may now be deleted."""
        if self.closed:
            return
        self.penciller.release_snapshot(snapshot_id)
        self.inker.release_snapshot(snapshot_id)
        self.lease.release(snapshot_id)
        self.reaper.wake.set()

    async def checkpoint(self, lifetime: float | None, name: str | None,
                         source: str | None, checkpoint_id: str | None = None) -> Checkpoint:
        """A durable checkpoint holding every write acknowledged before the call: the Inker
        first records every journal file written so far in the manifest. ``checkpoint_id``
        (a sharded store's) gives it that id instead of a new one."""
        self.writes.check_usable()
        if source is None:
            await self.inker.catalog()
        return await checkpoints.create_checkpoint(self.manifests, lifetime, name, source,
                                                   clock=self.clock, checkpoint_id=checkpoint_id)

    async def list_checkpoints(self) -> list[Checkpoint]:
        return await checkpoints.list_checkpoints(self.manifests, self.clock)

    async def refresh_checkpoint(self, checkpoint_id: str, lifetime: float | None) -> Checkpoint:
        return await checkpoints.refresh_checkpoint(self.manifests, checkpoint_id, lifetime,
                                                    self.clock)

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint. The lease is brought up to date first, so a GC pass right
        after this frees what only the checkpoint needed."""
        await checkpoints.delete_checkpoint(self.manifests, checkpoint_id, self.clock)
        await self.lease.flush()
        self.reaper.wake.set()

    # -- the change feed (see client.listen) --

    async def listen_next(self, after: int, timeout: float, max_rows: int) -> pa.Table | None:
        """For a listener at ``after``: the journal rows of the next acknowledged changes
        (at most ``max_rows``), once there are any (an empty table after ``timeout``), or
        ``None`` when they are no longer in memory (the listener reads the Journal)."""
        self._check_readable()
        tail = self.writes.tail
        if not tail.covers(after):
            return None
        await tail.wait_after(after, timeout)
        if not tail.covers(after):
            return None
        return tail.rows_after(after, max_rows)

    # -- history leases (see manifest.history) --

    async def set_history_lease(self, name: str, sqn: int, lifetime: float) -> HistoryLease:
        """Hold every change after ``sqn`` from journal compaction for ``lifetime`` seconds."""
        return await history_leases.set_lease(self.manifests, name, sqn, lifetime, self.clock)

    async def drop_history_lease(self, name: str) -> None:
        await history_leases.drop_lease(self.manifests, name, self.clock)

    async def list_history_leases(self) -> list[HistoryLease]:
        return await history_leases.list_leases(self.manifests, self.clock)
