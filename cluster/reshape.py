"""Splitting and moving a shard of a running sharded store, through its handle.

Both close the shard's Bookie (it finishes the writes it took), change what runs, and start
the new Bookies; meanwhile the handle's calls to that shard wait (see
:meth:`ShardedStore._changing <leveled_ray.cluster.store.ShardedStore._changing>`) and then
follow the new layout, as other handles do by themselves (see :mod:`.redirect`). Reads of the
shard pause with its writes; other shards are untouched.

- **Split** (:func:`split_running`): the split at rest of :mod:`.split`, between the close and
  the children's opens; the children run on the shard's node, and their processes start
  before the close, so that the pause holds only their opens. If the split fails before its
  commit point, the shard is opened again where it was, and the error raised; if that open
  finds the shard retired (the split's commit landed late), the split is done after all.
- **Move** (:func:`move_running`): the shard's Bookie restarted on another node. Its new
  process starts before the close, under a name of its own, which handles find through the
  shard's (:mod:`..client.actor_names`), so that the pause holds only its open.
- **Rebalance** (:func:`rebalance`): moves, one at a time, from the node that runs the most
  shards to the one that runs the fewest, until they are at most one apart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import NamedTuple

from ..client import actor_names, bookies
from ..errors import InvalidArgumentError, WrongShardError
from ..files.store import ObjectStore
from ..manifest.shard_map import ShardMap
from . import placement
from .layout import shard_name
from .redirect import Layout, marked
from .split import children_tag, settle_splits, split_shard


def _name(store, prefix: str) -> str | None:
    """The name of the Bookie of the shard at ``prefix`` (its actor may run under another:
    see :mod:`..client.actor_names`)."""
    return None if store.name is None else shard_name(store.name, prefix)


def drop_group(store, prefix: str) -> None:
    """Remove the placement group of the shard at ``prefix``, if it moved or split (once its
    Bookie is closed: Ray ends the actors of a removed group)."""
    name, runtime = _name(store, prefix), store.runtime
    runtime.remove(store._shard_groups.pop(prefix, None) or runtime.named(
        placement.shard_placement_name(None if name is None else runtime.resolve(name))))


class _Starting(NamedTuple):
    """Bookies whose processes start ahead of the close (see :func:`_create`)."""

    shard_map: ShardMap
    shards: list[int]
    specs: list
    actors: list
    groups: list  # each one's placement group


async def _create(store, shard_map: ShardMap, shards: list[int], node: str | None, *,
                  moving: bool = False) -> _Starting:
    """The Bookies of ``shards`` of ``shard_map``, made (their processes started) but not yet
    opened, each in a placement group of its own on ``node`` (where Ray picks: ``None``),
    under its shard's name, or when ``moving``, under a name of its own: the shard's Bookie
    still runs under the shard's."""
    specs, groups, runtime = [], [], store.runtime
    try:
        for shard in shards:
            name = _name(store, shard_map.prefixes[shard])
            actor_name = actor_names.moved(name) if moving and name is not None else name
            groups.append(await runtime.on_node(
                node, placement.shard_placement_name(actor_name), store.detached))
            specs.append(bookies.BookieSpec(
                shard_map.shard_url(store.url, shard), actor_name,
                scheduling=runtime.bundle(groups[-1], 0),
                shard=(store.name or store.url, shard_map.labels[shard])))
        actors = await runtime.create_bookies(specs, store.options, detached=store.detached,
                                              head_only=store.head_only, clock=store.clock)
    except BaseException:
        _remove(store, groups)
        raise
    starting = _Starting(shard_map, shards, specs, actors, groups)
    try:  # their processes up (seconds under load): a pause that follows holds their opens only
        await runtime.ready(actors)
    except BaseException:
        _abandon(store, starting)
        raise
    return starting


async def _open(store, starting: _Starting) -> list:
    """Open the stores of :func:`_create`'s Bookies, and have handles find them by their
    shards' names; on failure, stop them and drop their groups."""
    try:
        opened = await store.runtime.open_bookies(starting.actors, starting.specs,
                                                  store.options, store.clock)
    except BaseException:
        _remove(store, starting.groups)
        raise
    for shard, spec, group in zip(starting.shards, starting.specs, starting.groups):
        prefix = starting.shard_map.prefixes[shard]
        store._shard_groups[prefix] = group
        if spec.name is not None:
            store.runtime.point(_name(store, prefix), spec.name)
    return opened


def _abandon(store, starting: _Starting) -> None:
    """Stop Bookies created ahead but not to be opened, and drop their groups."""
    store.runtime.stop_bookies(starting.actors)
    _remove(store, starting.groups)


def _remove(store, groups: list) -> None:
    for group in groups:
        store.runtime.remove(group)


async def _start(store, shard_map: ShardMap, shards: list[int], node: str | None) -> list:
    """Start the Bookies of ``shards`` of ``shard_map`` (see :func:`_create`) and open them."""
    return await _open(store, await _create(store, shard_map, shards, node))


async def node_of(shard_store) -> str | None:
    """The node that runs a shard's Bookie."""
    return (await shard_store.stats_async())["process"]["node"]


def _check_shard(store, shard: int) -> None:
    if not isinstance(shard, int) or isinstance(shard, bool) or not 0 <= shard < store.shards:
        raise InvalidArgumentError(f"shard must be an int from 0 to {store.shards - 1}, not "
                                   f"{shard!r}")


async def split_running(store, shard: int) -> ShardMap:
    """Split shard ``shard`` of the running sharded store ``store`` (see the module)."""
    layout = store._layout
    layout.shard_map.split(shard)  # refused here if it cannot split, before anything changes
    parent = layout.stores[shard]
    running = await parent.stats_async()
    node = running["process"]["node"]
    root = ObjectStore.from_url(store.url, store.options)
    # The children's processes start before the close, outside the shard's pause, under the
    # names the split will give them: it claims the shard with the next epoch.
    planned = layout.shard_map.split(shard, children_tag(running["epoch"] + 1))
    children = await _create(store, planned, [shard, shard + 1], node)
    try:
        async with _changing(store, root, layout.shard_map.prefixes[shard]):
            await store.runtime.close_bookie(parent)
            drop_group(store, layout.shard_map.prefixes[shard])
            try:
                new_map = await split_shard(store.url, shard, store.options)
            except BaseException:
                new_map = await settle_splits(root, layout.shard_map, store.options)
                if layout.shard_map.prefixes[shard] in new_map.prefixes:  # before commit...
                    try:
                        again = await _start(store, layout.shard_map, [shard], node)
                    except WrongShardError:
                        # ...or its retire, in flight, landed after that read: committed (the
                        # shard's open, claiming the same manifest version, would fence it)
                        new_map = await settle_splits(root, layout.shard_map, store.options)
                    else:
                        _abandon(store, children)
                        children = None
                        store._layout = _replaced(layout, shard, again, layout.shard_map)
                        raise
            if new_map.prefixes == planned.prefixes:
                starting, children = children, None  # _open cleans up after itself
                opened = await _open(store, starting)
            else:  # another writer claimed the shard meanwhile: the children have other names
                _abandon(store, children)
                children = None
                opened = await _start(store, new_map, [shard, shard + 1], node)
            store._layout = _replaced(layout, shard, opened, new_map)
    finally:
        if children is not None:
            _abandon(store, children)
    return new_map


async def move_running(store, shard: int, node_id: str) -> None:
    """Restart shard ``shard``'s Bookie of ``store`` on node ``node_id`` (see the module)."""
    _check_shard(store, shard)
    if node_id not in store.runtime.alive_nodes():
        raise InvalidArgumentError(f"no Ray node {node_id!r} is alive")
    layout = store._layout
    if await node_of(layout.stores[shard]) == node_id:
        return
    root = ObjectStore.from_url(store.url, store.options)
    prefix = layout.shard_map.prefixes[shard]
    # The new Bookie's process starts before the close, outside the shard's pause, under a
    # name of its own (the shard's is held until the close).
    starting = await _create(store, layout.shard_map, [shard], node_id, moving=True)
    try:
        async with _changing(store, root, prefix):
            await store.runtime.close_bookie(layout.stores[shard])
            drop_group(store, prefix)
            opening, starting = starting, None  # _open cleans up after itself
            moved = await _open(store, opening)
            store._layout = _replaced(layout, shard, moved, layout.shard_map)
    finally:
        if starting is not None:
            _abandon(store, starting)


async def rebalance(store) -> list[dict]:
    """Spread ``store``'s shards over the nodes alive now (see the module)."""
    nodes = store.runtime.alive_nodes()
    found = await asyncio.gather(*(node_of(s) for s in store._stores))
    running = collections.defaultdict(list, {node: [] for node in nodes})
    for shard, node in enumerate(found):
        running[node].append(shard)
    moves = []
    while True:
        fullest = max(running, key=lambda n: len(running[n]))
        emptiest = min(nodes, key=lambda n: len(running[n]))
        if len(running[fullest]) - len(running[emptiest]) <= 1:
            return moves
        shard = running[fullest].pop()
        await move_running(store, shard, emptiest)
        running[emptiest].append(shard)
        moves.append({"shard": store.shard_map.labels[shard], "from": fullest,
                      "to": emptiest})


@contextlib.asynccontextmanager
async def _changing(store, root: ObjectStore, prefix: str):
    """While the shard at ``prefix`` is split or moved: this handle's calls to it wait, and
    other handles' too (its mark, see :mod:`.redirect`)."""
    with store._changing():
        async with marked(root, prefix, store.clock):
            yield


def _replaced(layout: Layout, shard: int, stores: list, shard_map: ShardMap) -> Layout:
    return Layout(layout.stores[:shard] + tuple(stores) + layout.stores[shard + 1:], shard_map)
