"""Sending a batch of keys to the shards that hold them: grouped by shard, sent to all at
once, answered in input order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from ..codec import checked_keys
from ..codec.routing import shards_of
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


async def per_shard(targets: Sequence, pairs: Sequence, options: Options, shard_map: ShardMap,
                    call: str) -> list:
    """``targets[s].<call>(its pairs)`` for every shard ``s`` holding some of ``pairs``, all at
    once; the answers in the order of ``pairs``."""
    groups = shard_groups(checked_keys(pairs, options), shard_map)
    found = await asyncio.gather(*(getattr(targets[s], call)([pairs[i] for i in where])
                                   for s, where in groups.items()))
    out: list = [None] * len(pairs)
    for where, values in zip(groups.values(), found):
        for i, value in zip(where, values):
            out[i] = value
    return out
