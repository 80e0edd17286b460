"""Checkpoints of a sharded store: one checkpoint per shard, all with the same id, taken at one
consistent cut (see :mod:`.cut`; without Ray, :func:`.admin.quiet_cut`).

Each shard's part is created short-lived (:data:`PARTIAL_S` at most) and given its full lifetime
only once every shard holds one, so a checkpoint whose creator died half-way expires by itself.
A sharded checkpoint is live while every shard holds its part.

A split keeps the checkpoints taken before it: their parts stay in the shards of the shard map
version they were taken under (a shard the split retired is kept while a checkpoint holds it:
see :meth:`.admin.ShardedAdmin.gc_async`), so they are listed, read, cloned, refreshed and
deleted there, by their id. The handle gives ``_earlier_layouts_async()``: an admin over each
earlier shard map, newest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from ..errors import CheckpointNotFoundError
from ..files.names import ulid
from ..manifest.checkpoints import check_checkpoint_id
from ..manifest.model import Checkpoint
from .cut import Early

#: A part's lifetime until every shard holds one.
PARTIAL_S = 600.0
#: A sharded checkpoint pins one manifest version per shard: it has no one ``manifest_id``.
NO_VERSION = -1


def whole(parts: list[Checkpoint]) -> Checkpoint:
    """A sharded checkpoint, as its first part says (its versions are per shard)."""
    return dataclasses.replace(parts[0], manifest_id=NO_VERSION)


async def create(store, lifetime: float | None, name: str | None, source: str | None,
                 checkpoint_id: str | None = None) -> tuple[Checkpoint, list[Checkpoint]]:
    """A checkpoint of every shard at one cut (``store._cut``), or copies of checkpoint
    ``source``'s parts, with id ``checkpoint_id`` (a new ULID when ``None``); returns it and
    its parts, in shard order. ``store`` is a sharded store or its admin:
    ``store._checkpoint_part`` makes one shard's part."""
    check_checkpoint_id(checkpoint_id)
    checkpoint_id = checkpoint_id or ulid()
    first = PARTIAL_S if lifetime is None else min(lifetime, PARTIAL_S)

    def take(shard: int):
        return store._checkpoint_part(shard, first, name, source, checkpoint_id)
    if source is None:
        early = Early(("checkpoint", first, name, checkpoint_id),
                      lambda shard, _: _delete_part(store.shard(shard), checkpoint_id))
        parts, _ = await store._cut(take, early)
    else:  # each part copies its shard's part of a checkpoint that is a cut already
        parts = await asyncio.gather(*(take(s) for s in range(store.shards)))
    if first != lifetime:
        parts = await refresh(store, checkpoint_id, lifetime)
    return whole(parts), list(parts)


async def refresh(store, checkpoint_id: str, lifetime: float | None) -> list[Checkpoint]:
    return list(await asyncio.gather(*(store.shard(s).refresh_checkpoint_async(
        checkpoint_id, lifetime) for s in range(store.shards))))


async def live(store) -> list[Checkpoint]:
    """The checkpoints every shard holds a part of."""
    each = await asyncio.gather(*(store.shard(s).list_checkpoints_async()
                                  for s in range(store.shards)))
    common = set.intersection(*({c.id for c in cps} for cps in each))
    return [whole([c]) for c in each[0] if c.id in common]


async def holds(store, checkpoint_id: str) -> bool:
    """Whether every shard of ``store`` (a sharded store or admin) holds a live part of
    ``checkpoint_id``."""
    each = await asyncio.gather(*(store.shard(s).list_checkpoints_async()
                                  for s in range(store.shards)))
    return all(any(c.id == checkpoint_id for c in cps) for cps in each)


async def delete(store, checkpoint_id: str) -> None:
    """Delete every shard's part; ``CheckpointNotFoundError`` if no shard had one."""
    found = await asyncio.gather(*(_delete_part(store.shard(s), checkpoint_id)
                                   for s in range(store.shards)))
    if not any(found):
        raise CheckpointNotFoundError(f"no live checkpoint {checkpoint_id!r}")


async def _delete_part(shard, checkpoint_id: str) -> bool:
    with contextlib.suppress(CheckpointNotFoundError):
        await shard.delete_checkpoint_async(checkpoint_id)
        return True
    return False


class CheckpointsOfShards:
    """The checkpoint calls every sharded handle (the store, its admin) offers alike; the
    handle gives ``shards``, ``shard(s)``, ``_cut`` and ``_checkpoint_part``."""

    async def list_checkpoints_async(self) -> list[Checkpoint]:
        """The live checkpoints: those every shard holds a part of, and those taken before a
        split (every shard of an earlier shard map holds a part). Cost: the plain call's on
        each shard, at once; after splits, a listing and read of the shard maps and the
        plain call on each earlier layout's shards."""
        found = {c.id: c for c in await live(self)}
        for layout in await self._earlier_layouts_async():
            for c in await live(layout):
                found.setdefault(c.id, c)
        return list(found.values())

    async def refresh_checkpoint_async(self, checkpoint_id: str,
                                       lifetime: float | None = None) -> Checkpoint:
        """Expire the checkpoint ``lifetime`` seconds from now (``None``: never). Cost: a
        listing of each shard's checkpoints, then the plain call on each shard, at once (a
        checkpoint taken before a split: on the shards of its layout, found as
        :meth:`list_checkpoints` finds it)."""
        layout = await self._layout_of_async(checkpoint_id)
        return whole(await refresh(layout, checkpoint_id, lifetime))

    async def delete_checkpoint_async(self, checkpoint_id: str) -> None:
        """Delete a checkpoint: every shard's part of it (a checkpoint taken before a split:
        every part in the shards of its layout; a half-made one: the parts there are). Cost:
        a listing of each shard's checkpoints, then the plain call on each shard."""
        try:
            layout = await self._layout_of_async(checkpoint_id)
        except CheckpointNotFoundError:
            layout = self  # no layout holds it whole: delete the parts there are
        await delete(layout, checkpoint_id)

    async def _layout_of_async(self, checkpoint_id: str):
        """This handle if every shard holds a part of ``checkpoint_id``; otherwise an admin
        over the newest earlier shard map whose every shard does (a checkpoint taken before a
        split); ``CheckpointNotFoundError`` if none does."""
        for layout in [self, *await self._earlier_layouts_async()]:
            if await holds(layout, checkpoint_id):
                return layout
        raise CheckpointNotFoundError(f"no live checkpoint {checkpoint_id!r}")
