"""Sending a batch of keys to the shards that hold them: grouped by shard, sent to all at
once, answered in input order; and, for a store's own reads, never half of a cross-shard
batch (:func:`stale_shards`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..codec import Head, checked_key, checked_keys
from ..codec.routing import shards_of
from ..errors import ConflictError
from ..manifest.shard_map import ShardMap
from ..options import Options


def group_by_shard(shards: np.ndarray) -> dict[int, np.ndarray]:
    """The positions of each shard's items, in input order."""
    if not len(shards):
        return {}
    order = np.argsort(shards, kind="stable")
    bounds = np.flatnonzero(np.diff(shards[order])) + 1
    return {int(shards[part[0]]): part for part in np.split(order, bounds)}


def shard_groups(lkeys: Sequence[bytes], shard_map: ShardMap) -> dict[int, np.ndarray]:
    """:func:`group_by_shard` of object Ledger keys."""
    return group_by_shard(shards_of(lkeys, shard_map.runs, shard_map.route_by))


#: Rounds of a checked read before it gives up re-reading (each one follows a batch that
#: committed while it read; more than a few means batches commit faster than it reads).
MAX_ROUNDS = 8


def in_input_order(count: int, groups: dict, found: Sequence[list]) -> list:
    out: list = [None] * count
    for where, values in zip(groups.values(), found):
        for i, value in zip(where, values):
            out[i] = value
    return out


async def per_shard(targets: Sequence, pairs: Sequence, options: Options, shard_map: ShardMap,
                    read: Callable[[Any, list], Awaitable]) -> list:
    """``read(targets[s], its pairs)`` for every shard ``s`` holding some of ``pairs``, all at
    once; the answers in the order of ``pairs``."""
    groups = shard_groups(checked_keys(pairs, options), shard_map)
    found = await asyncio.gather(*(read(targets[s], [pairs[i] for i in where])
                                   for s, where in groups.items()))
    return in_input_order(len(pairs), groups, found)


def stale_shards(began: dict[str, tuple], notes: dict[str, dict]) -> set[str]:
    """The shards (by label) to read again so that a batched read holds no part of a
    cross-shard batch without the rest. ``began[s]``: how many parts shard ``s`` had prepared
    when its read began, as ``(writer epoch, count)``; ``notes[s]``: for keys shard ``s``
    returned that a recent batch wrote, that batch's part number in each of its shards. A
    shard whose read began before it prepared its part of such a batch read before the batch
    could be visible there: it is read again. (A read that began after it waited for the
    part's decision, since a prepared part holds its keys.)"""
    return {other for shard, found in notes.items() for numbers in found.values()
            for other, number in numbers.items()
            if other != shard and other in began and began[other] < number}


async def per_shard_checked(targets: Sequence, pairs: Sequence, options: Options,
                            shard_map: ShardMap,
                            read: Callable[[Any, list], Awaitable]) -> list:
    """:func:`per_shard` with a ``*_checked`` read, read again where :func:`stale_shards`
    says, so that the answers hold every cross-shard batch whole or not at all;
    ``ConflictError`` (retry it) when a shard is still stale after :data:`MAX_ROUNDS`."""
    groups = shard_groups(checked_keys(pairs, options), shard_map)
    labels = shard_map.labels
    replies: dict[int, tuple] = {}
    todo = list(groups)
    for _ in range(MAX_ROUNDS):
        found = await asyncio.gather(*(read(targets[s], [pairs[i] for i in groups[s]])
                                       for s in todo))
        replies.update(zip(todo, found))
        stale = stale_shards({labels[s]: r[1] for s, r in replies.items()},
                             {labels[s]: r[2] for s, r in replies.items()})
        todo = [s for s in sorted(replies) if labels[s] in stale]
        if not todo:
            break
    else:
        raise ConflictError(
            f"a batched read met cross-shard batches committing as it read, {MAX_ROUNDS} "
            f"times, so it could not see each whole: nothing returned, read again")
    return in_input_order(len(pairs), groups, [replies[s][0] for s in groups])


class RoutedKeyReads:
    """Reads by key for a handle made of one part per shard (a snapshot or a reader each):
    one key goes to its shard's part; many keys to every shard involved, at once, with the
    answers in input order. The handle gives ``parts``, ``shard_map`` and ``options``, and
    may make :meth:`_ready` wait for something first (a reader renews its checkpoints)."""

    async def _ready(self) -> None:
        return None

    def _part_of(self, bucket, key):
        return self.parts[self.shard_map.shard_of(checked_key(bucket, key, self.options))]

    async def get_async(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)``, or ``None``. Cost: the plain part's, on the key's
        shard."""
        await self._ready()
        return await self._part_of(bucket, key).get_async(bucket, key)

    async def head_async(self, bucket, key) -> Head | None:
        """The object's head, or ``None``. Cost: the plain part's, on the key's shard."""
        await self._ready()
        return await self._part_of(bucket, key).head_async(bucket, key)

    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """Values of many ``(bucket, key)`` pairs, ``None`` where absent. Cost: the plain
        parts' calls, one per shard involved, at once."""
        await self._ready()
        return await per_shard(self.parts, list(pairs), self.options, self.shard_map,
                               lambda part, some: part.get_many_async(some))

    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """Heads of many ``(bucket, key)`` pairs, ``None`` where absent. Cost: as
        :meth:`get_many_async`, without the values."""
        await self._ready()
        return await per_shard(self.parts, list(pairs), self.options, self.shard_map,
                               lambda part, some: part.head_many_async(some))

    async def _versions_async(self, pairs: Iterable[Sequence], values: bool
                             ) -> tuple[list[Head | None], list[bytes | None] | None]:
        """Heads and, with ``values``, values of many pairs: one call per shard involved."""
        await self._ready()

        async def both(part, some):
            heads, found = await part._versions_async(some, values)
            return list(zip(heads, found or [None] * len(heads)))
        pairs_read = await per_shard(self.parts, list(pairs), self.options, self.shard_map,
                                     both)
        heads = [h for h, _ in pairs_read]
        return heads, [v for _, v in pairs_read] if values else None
