"""Where a sharded store's Bookies run, as a running store's handle reaches it: Ray's actors,
placement groups and key-value store.

A split or a move (:mod:`.reshape`), a handle following a new layout (:mod:`.redirect`) and a
handle's close make and find Bookies only through a :class:`Runtime`, which a
:class:`~leveled_ray.cluster.store.ShardedStore` holds (:data:`RAY` unless it was given
another). It is the one seam through which the deterministic simulation (``testing/sim``)
runs those modules unchanged, on processes of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..actors.remote import NAMESPACE
from ..client import actor_names, bookies
from ..client.store import Store
from ..clock import Clock
from ..manifest.shard_map import ShardMap
from ..options import Options
from . import placement
from .layout import shard_name
from .redirect import Layout


class Runtime:
    """Ray's: each method is the Ray call it names (see :mod:`.placement`,
    :mod:`~leveled_ray.client.bookies`, :mod:`~leveled_ray.client.actor_names`); the blocking
    ones run in a thread."""

    # -- Bookies --

    async def create_bookies(self, specs: Sequence[bookies.BookieSpec], options: Options, *,
                             detached: bool, head_only: str | None, clock: Clock) -> list:
        """Their actors, made, their stores not opened (:func:`~.bookies.create_bookies`)."""
        return await asyncio.to_thread(bookies.create_bookies, specs, options,
                                       detached=detached, head_only=head_only, clock=clock)

    async def ready(self, actors: list) -> None:
        """Once every one's process is up."""
        await asyncio.gather(*(actor.__ray_ready__.remote() for actor in actors))

    async def open_bookies(self, actors: list, specs: Sequence[bookies.BookieSpec],
                           options: Options, clock: Clock) -> list[Store]:
        """Their stores opened (:func:`~.bookies.open_bookies`: all stopped if one fails)."""
        return await asyncio.to_thread(bookies.open_bookies, actors, specs, options, clock)

    def stop_bookies(self, actors: list) -> None:
        """End them at once (no close, no restart)."""
        bookies.stop_bookies(actors)

    async def close_bookie(self, store: Store) -> None:
        """A clean close of one shard's Bookie, its actor then ended (:meth:`Store.close`)."""
        await store.close_async()

    # -- names --

    def resolve(self, name: str) -> str:
        return actor_names.resolve(name)

    def point(self, name: str, actor_name: str) -> None:
        actor_names.point(name, actor_name)

    def forget(self, name: str) -> None:
        actor_names.forget(name)

    async def running_bookies(self, name: str, shard_map: ShardMap,
                              current: Layout) -> Layout | None:
        """The layout of ``shard_map`` with each shard's running Bookie (by its actor name),
        reusing ``current``'s handles where the actor is the same; ``None`` if one is not
        running, or if nothing changed."""
        return await asyncio.to_thread(_connect, name, shard_map, current)

    # -- placement --

    async def on_node(self, node_id: str | None, name: str | None, detached: bool):
        """A ready placement group of one bundle on ``node_id`` (:func:`.placement.on_node`)."""
        return await asyncio.to_thread(placement.on_node, node_id, name, detached)

    def bundle(self, group, index: int):
        return placement.bundle(group, index)

    def remove(self, group) -> None:
        placement.remove(group)

    def named(self, name: str | None):
        return placement.named(name)

    def alive_nodes(self) -> list[str]:
        return placement.alive_nodes()


#: The runtime of every handle opened through Ray.
RAY = Runtime()


def _connect(name: str, shard_map: ShardMap, current: Layout) -> Layout | None:
    import ray

    mine = dict(zip(current.shard_map.prefixes, current.stores))
    stores = []
    for prefix in shard_map.prefixes:
        try:
            actor = ray.get_actor(actor_names.resolve(shard_name(name, prefix)),
                                  namespace=NAMESPACE)
        except ValueError:
            return None  # not running (yet): nothing to send the call to
        known = mine.get(prefix)
        if known is not None and known._actor._actor_id == actor._actor_id:
            stores.append(known)
        else:
            stores.append(bookies.connect_bookie(shard_name(name, prefix)))
    if shard_map.same_layout(current.shard_map) and all(
            a is b for a, b in zip(stores, current.stores)):
        return None
    return Layout(tuple(stores), shard_map)
