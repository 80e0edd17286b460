"""The Bookie's shard-side calls: a cross-shard batch's part (prepare, commit, abort), a
consistent cut's freeze, apply and thaw, and the install of a bulk write's files, plain or as
one shard's part. The calls a :class:`~leveled_ray.client.shard_side.ShardSide` makes."""

from __future__ import annotations

import asyncio

from ..read.views import LedgerFiles
from .metrics import timed
from .remote import unpack


class ShardCalls:
    """Mixed into :class:`~.bookie.Bookie`, whose state these calls use."""

    # -- cross-shard put_many (see .participant) --

    async def prepare(self, txn: str, root_url: str, packed_changes: bytes,
                      values: list) -> Exception | str | tuple[int, int]:
        """Prepare this shard's part of cross-shard batch ``txn``: its part number once
        durable and locked, ``"busy"``, or its conditions' failure."""
        return await self.participant.prepare(txn, root_url, unpack(packed_changes), values)

    @timed("leveled_put_latency_seconds")
    async def commit_part(self, txn: str, numbers: dict | None = None) -> list[int]:
        """Apply this shard's prepared part of ``txn``; returns its SQNs. ``numbers``: each
        shard's part number, noted with the keys (see :meth:`get_many_checked`)."""
        return await self.participant.commit(txn, numbers)

    async def abort_part(self, txn: str) -> None:
        """Drop this shard's prepared part of ``txn``."""
        await self.participant.abort(txn)

    # -- cuts of a sharded store (see leveled_ray.cluster.cut) --

    async def freeze(self, cut_id: str, hold_s: float, take: str | None = None,
                     *args) -> dict | str:
        """Hold writes for cut ``cut_id`` (every admitted one durable first), at most
        ``hold_s`` seconds; ``"busy"`` while another cut (or a bulk install) holds them.
        Returns ``{"pending", "taken"}``: the cross-shard batches whose parts this shard holds
        prepared, and, when there are none and ``take`` names one (``"snapshot"`` or
        ``"checkpoint"``), what ``self.<take>(*args)`` gives at once: one call for both."""
        self.writes.check_usable()
        if not await self.writes.freeze(cut_id, lambda: self.tasks.start(
                self._thaw_after(cut_id, hold_s), f"cut {cut_id}")):
            return "busy"
        await self.participant.prepares_done()  # no part is prepared until the thaw
        pending = self.participant.pending()
        taken = None
        if take is not None and not pending:
            taken = await {"snapshot": self.snapshot, "checkpoint": self.checkpoint}[take](*args)
        return {"pending": pending, "taken": taken}

    async def _thaw_after(self, cut_id: str, hold_s: float) -> None:
        await asyncio.sleep(hold_s)
        self.writes.thaw(cut_id)  # its cutter is gone: never hold writes longer

    async def cut_apply(self, cut_id: str, txns: list[str]) -> None:
        """Apply the parts of these committed batches while cut ``cut_id`` holds writes, so
        that the cut holds them."""
        self.writes.let_in(cut_id, txns)
        await asyncio.gather(*(self.participant.commit(txn) for txn in txns))

    def thaw(self, cut_id: str) -> bool:
        """Admit writes again after cut ``cut_id``; whether the cut still held them (a shard
        thaws by itself after the cut's ``hold_s``)."""
        return self.writes.thaw(cut_id)

    def reserve_bulk(self, at: int | None = None) -> dict:
        """Reserve a window of SQNs for a bulk write (see :mod:`leveled_ray.bulk.write`), from
        ``at`` if given: ``base`` is ``None`` if that is taken, and ``lowest`` says the lowest
        base free now."""
        base, lowest = self.writes.reserve_bulk(at)
        return {"base": base, "lowest": lowest, "indexed": self.writes.indexed,
                "epoch": self.epoch}

    async def ingest(self, packed: bytes) -> int:
        """Install a bulk write's files: writes pause, every acknowledged change is persisted
        to the Ledger, then the Penciller installs the files in one manifest change. Returns
        the manifest version. A streaming write's ``mark`` (``(writer, batch id)``) installs
        a batch once however often it is sent."""
        journal, ssts, mark = unpack(packed)
        self.writes.check_usable()
        if journal:  # parts of bulk writes from below this one's window go in (or out) first
            await self.participant.settle_lower(min(j.min_sqn for j in journal))
        return (await self._install_files(journal, ssts, mark=mark)).version

    async def _install_files(self, journal: tuple, ssts: tuple, txn: str | None = None,
                             mark: tuple[str, int] | None = None) -> LedgerFiles:
        """:meth:`ingest`, also as the part of cross-shard bulk write ``txn``; files this
        store holds already (a part applied again after a restart) change nothing."""
        present = {j.name for j in self.inker.files}
        if journal and all(j.name in present for j in journal):
            self.writes.bulk_installed(min(j.min_sqn for j in journal))
            return self.view.files

        async def install() -> tuple[LedgerFiles, bool]:
            await self._push()
            files, installed = await self.penciller.ingest(
                journal, ssts, self.writes.durable_sqn, mark, held=txn is not None)
            if installed:
                self.inker.adopt(journal)
            if files.version > self.view.files.version:
                self._adopt(files)
            return files, installed

        files = await self.writes.install(journal, ssts, install, txn)
        if journal:  # in: GC need not wait for its files (not before: a failed install is retried)
            self.writes.bulk_installed(min(j.min_sqn for j in journal))
        return files

    async def prepare_ingest(self, txn: str, root_url: str, packed: bytes) -> tuple[int, int]:
        """Prepare this shard's part of a bulk write across shards (its files)."""
        self.writes.check_usable()
        journal, ssts = unpack(packed)
        return await self.participant.prepare_ingest(txn, root_url, journal, ssts)
