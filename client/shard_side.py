"""The calls a sharded store, a cut, a bulk write and a listener make on one store's Bookie.

They are not a user's: a :class:`~.store.Store` keeps only what a user calls, and these live
here, on a :class:`ShardSide` made from the store when needed (it holds nothing of its own).
Each is one Bookie call, async only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..actors.remote import ValueBatch, call, call_read, pack
from ..codec import Change, Delete, Put, heads_of, written

if TYPE_CHECKING:
    from .store import Store


class ShardSide:
    """The shard-side calls on ``store``'s Bookie."""

    def __init__(self, store: Store):
        self._store = store
        self._actor = store._actor

    async def listen_next(self, after: int, timeout: float, max_rows: int):
        """For a listener: the next changes' journal rows (see ``Bookie.listen_next``)."""
        return await call(self._actor.listen_next, after, timeout, max_rows)

    # -- cross-shard put_many (see leveled_ray.cluster.txn) --

    def checked_changes(self, items: Iterable[Put | Delete]) -> tuple[list[Change], list]:
        """A batch's changes and values, checked as the store's ``put_many`` checks them."""
        changes, values, _ = self._store._changes(items)
        return changes, values

    async def put_changes(self, changes: list[Change], values: list) -> list[int]:
        """``put_many`` of changes checked already: a sharded store checks a batch once, then
        sends each shard its part."""
        nbytes = sum(c.size for c in written(changes))  # a range check's size is a count
        return await call(self._actor.put_many, pack(changes), ValueBatch.pack(values, nbytes))

    async def prepare(self, txn: str, root_url: str, changes: list[Change], values: list):
        """Prepare this shard's part (checked changes and their values) of cross-shard batch
        ``txn``: its part number once it is durable and its keys are locked, ``"busy"``, or
        the failure of its conditions."""
        return await call(self._actor.prepare, txn, root_url, pack(changes), values)

    async def commit_part(self, txn: str, numbers: dict | None = None) -> list[int]:
        """Apply this shard's prepared part of ``txn`` (``numbers``: every shard's part
        number); returns its SQNs."""
        return await call(self._actor.commit_part, txn, numbers)

    async def get_many_checked(self, pairs: Iterable[Sequence]) -> tuple[list, int, dict]:
        """``get_many`` with the figures a sharded store checks batches with."""
        values, began, notes = await call_read(self._actor.get_many_checked,
                                               self._store._keys(pairs, "get"))
        return values.to_pylist(), began, notes

    async def head_many_checked(self, pairs: Iterable[Sequence]) -> tuple[list, int, dict]:
        """``head_many`` with the figures a sharded store checks batches with."""
        entries, began, notes = await call_read(self._actor.head_many_checked,
                                                self._store._keys(pairs, "head"))
        return heads_of(entries), began, notes

    async def abort_part(self, txn: str) -> None:
        """Drop this shard's prepared part of ``txn``."""
        await call(self._actor.abort_part, txn)

    async def prepare_ingest(self, txn: str, root_url: str, journal: tuple,
                             ssts: tuple) -> tuple[int, int]:
        """Prepare this shard's part of bulk write ``txn`` across shards: the files it wrote
        here, installed when the batch commits (see :mod:`leveled_ray.bulk.sharded`)."""
        return await call(self._actor.prepare_ingest, txn, root_url, pack((journal, ssts)))

    # -- cuts of a sharded store (see leveled_ray.cluster.cut) --

    async def freeze(self, cut_id: str, hold_s: float, take: tuple | None = None):
        """Hold this shard's writes for a cut: ``"busy"``, or ``(pending, taken)``: the
        batches it holds prepared and, if none and ``take`` is ``("snapshot", long_running,
        values, timeout_s)`` or ``("checkpoint", lifetime, name, checkpoint_id)``, that point
        in time, taken in the same call."""
        kind, args, finish = None, (), None
        if take is not None and take[0] == "snapshot":
            kind, finish = "snapshot", self._store._wrap_snapshot
            args = (self._store._snapshot_timeout(take[1], take[3]), bool(take[2]))
        elif take is not None:
            kind, args = "checkpoint", (take[1], take[2], None, take[3])
        answer = await call(self._actor.freeze, cut_id, hold_s, kind, *args)
        if answer == "busy":
            return answer
        taken = answer["taken"]
        return answer["pending"], (finish(taken) if finish and taken is not None else taken)

    async def cut_apply(self, cut_id: str, txns: list[str]) -> None:
        """Apply these committed batches' parts inside the cut."""
        await call(self._actor.cut_apply, cut_id, txns)

    def thaw_soon(self, cut_id: str) -> None:
        """Admit writes again after the cut (sent at once, not waited for)."""
        self._actor.thaw.remote(cut_id)

    async def thaw(self, cut_id: str) -> bool:
        """Admit writes again after the cut; whether the cut held them until now."""
        return await call(self._actor.thaw, cut_id)

    # -- bulk writes (see leveled_ray.bulk.write) --

    async def reserve_bulk(self, at: int | None = None) -> dict:
        """Reserve a window of SQNs for a bulk write, from ``at`` if given:
        ``{"base", "lowest", "indexed", "epoch"}`` (``base`` ``None``: ``at`` was taken)."""
        return await call(self._actor.reserve_bulk, at)

    async def ingest(self, journal: tuple, ssts: tuple,
                     mark: tuple[str, int] | None = None) -> int:
        """Install a bulk write's files through the Bookie; returns the manifest version
        (``mark``: a streaming write's ``(writer, batch id)``, installed once)."""
        return await call(self._actor.ingest, pack((journal, ssts, mark)))
