"""``lr.clone`` of either layout. A clone of a sharded store is a sharded store of the same
layout whose every shard is a clone (see :mod:`leveled_ray.admin.clone`) of the parent's shard,
all from one checkpoint of the parent, so from one consistent cut:

1. A sharded checkpoint of the parent named ``clone:<url>`` pins the cut (copied from
   ``checkpoint``'s parts when one is given; else taken without Ray, which is refused while
   the parent is written: take one through the running store and clone from it). Found again
   by name on a retry.
2. Each shard of the clone is made as a plain clone of the parent's shard at that checkpoint
   (each pins its own version in the parent's shard, found again by name on a retry).
3. The clone's shard map is created last: until then the clone's root is marked unfinished
   (from before step 1), an open refuses it, and a retried ``lr.clone`` carries on. Then the
   parent's pin of step 1 is released (by a retry too, when the first try died before it
   could).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from ..admin.clone import create_clone
from ..codec import Delete, Put
from ..errors import CheckpointNotFoundError, InvalidArgumentError
from ..files.names import MANIFEST_PREFIX
from ..files.store import ObjectStore
from ..files.store_config import parse_url, same_store
from ..manifest.shard_map import (
    ShardMap,
    create_shard_map,
    mark_unfinished,
    read_shard_map,
    unmark_unfinished,
)
from ..options import Options
from . import checkpoints
from .admin import ShardedAdmin


def revert(store, at_sqn=None, at_time: float | None = None) -> int:
    """Write back, as it was at ``at_sqn`` / ``at_time``, every object changed since: its
    value, metadata, index terms and expiry, or its absence. Returns the objects written.
    Running it again changes nothing more."""
    written = 0
    with store.snapshot(long_running=True, at_sqn=at_sqn, at_time=at_time) as past:
        after = past.sqn  # an SQN, or a sharded snapshot's position
        changed = sorted({(c.bucket, c.key) for c in store.changes(after, values=False)},
                         key=repr)
        for lo in range(0, len(changed), REVERT_BATCH):
            names = changed[lo:lo + REVERT_BATCH]
            then, now = past.head_many(names), store.head_many(names)
            values = past.get_many(names)
            batch, now_s = [], store.clock()  # the store's time: expiry is judged by it
            for (bucket, key), old, new, value in zip(names, then, now, values):
                if old is None or (old.expires_at and old.expires_at <= now_s):
                    if new is not None:
                        batch.append(Delete(bucket, key))
                    continue
                if same_object(old, new):  # as it was already (a revert run again)
                    continue
                held = set(new.indexes) if new is not None else set()
                terms = ([("remove", f, t) for f, t in sorted(held - set(old.indexes))]
                         + [("add", f, t) for f, t in old.indexes])
                batch.append(Put(bucket, key, value, indexes=terms, metadata=old.metadata,
                                 expires_at=old.expires_at or None))
            if batch:
                store.put_many(batch)
                written += len(batch)
    return written


def same_object(old, new) -> bool:
    """Whether ``new`` (a head now) is the object ``old`` (a head then) again: the same value
    (by hash and size), metadata, index terms and expiry (to the second: a written-back TTL
    is counted from the time it is written)."""
    if new is None or (new.hash, new.size) != (old.hash, old.size):
        return False
    if (new.metadata or None) != (old.metadata or None) or tuple(new.indexes) != tuple(
            old.indexes):
        return False
    if old.expires_at is None or new.expires_at is None:
        return old.expires_at == new.expires_at
    return abs(new.expires_at - old.expires_at) < 1.0


#: Objects a revert writes per ``put_many``.
REVERT_BATCH = 1000


async def create_any_clone(parent_url: str, url: str, checkpoint: str | None,
                           options: Options, parent_options: Options | None) -> None:
    parse_url(url)
    parent_options = parent_options or options
    parent_map = await read_shard_map(ObjectStore.from_url(parent_url, parent_options))
    if parent_map is None:
        await create_clone(parent_url, url, checkpoint, options, parent_options)
    else:
        if checkpoint is not None:  # taken before a split: cloned in its own layout
            parent = ShardedAdmin(parent_url, parent_map, parent_options)
            parent_map = (await parent._layout_of_async(checkpoint)).shard_map
        await create_sharded_clone(parent_url, parent_map, url, checkpoint, options,
                                   parent_options)


async def create_sharded_clone(parent_url: str, parent_map: ShardMap, url: str,
                               checkpoint: str | None, options: Options,
                               parent_options: Options) -> ShardMap:
    """Make (or finish making) the sharded clone at ``url``; returns its shard map."""
    if same_store(parent_url, url):
        raise InvalidArgumentError("a clone needs a location of its own")
    root = ObjectStore.from_url(url, options)
    parent = ShardedAdmin(parent_url, parent_map, parent_options)
    label = f"clone:{url}"
    pin = next((c for c in await parent.list_checkpoints_async() if c.name == label), None)
    found = await read_shard_map(root)
    if found is not None:
        if not found.same_layout(parent_map):
            raise InvalidArgumentError(f"{url} holds a sharded store of another layout")
        if pin is not None:  # made, but its maker died before it released the pin
            with contextlib.suppress(CheckpointNotFoundError):
                await checkpoints.delete(parent, pin.id)
        await unmark_unfinished(root, "clone")
        return found  # done (a plain clone checks its parent when opened: each shard's)
    if await root.list_async(MANIFEST_PREFIX):
        raise InvalidArgumentError(f"{url} holds a plain store")
    await mark_unfinished(root, "clone")  # no open takes the shards for a store until 3.
    if pin is None:  # 1.
        pin = (await checkpoints.create(parent, None, label, checkpoint))[0]
    await asyncio.gather(*(create_clone(  # 2.
        parent_map.shard_url(parent_url, s), parent_map.shard_url(url, s), pin.id, options,
        parent_options) for s in range(parent_map.count)))
    made = await create_shard_map(root, dataclasses.replace(parent_map, version=1))  # 3.
    await unmark_unfinished(root, "clone")
    with contextlib.suppress(CheckpointNotFoundError):
        await checkpoints.delete(parent, pin.id)
    return made
