"""Which layout an open finds or creates at a store's root: a plain store, or the shard map
of a sharded one. Bad input is refused before anything is created."""

from __future__ import annotations

import re

from ..codec.routing import check_route_by, check_shards
from ..errors import InvalidArgumentError
from ..files.names import MANIFEST_PREFIX
from ..files.store import ObjectStore
from ..manifest.shard_map import ShardMap, create_shard_map, unfinished
from ..options import Options
from .backup import find_shard_map


async def resolve_layout(root: ObjectStore, shards: int | None, route_by: str | None,
                         options: Options | None = None) -> ShardMap | None:
    """The shard map an open of ``root`` uses, or ``None`` for a plain store.

    - A sharded store is reopened as it is: ``shards`` and ``route_by``, when given, must
      match what its shard map records.
    - Without a shard map, ``shards`` creates one, unless a plain store is there already.
    - Without either, the store is plain (created if absent, as always).
    - A root that a sharded clone or backup is making (marked, until it writes the shard map,
      last) is refused: only running the clone or backup again finishes it.
    """
    if shards is not None:
        check_shards(shards)
    if route_by is not None:
        check_route_by(route_by)
    found = await find_shard_map(root, options or Options())
    if found is not None:
        if shards is not None and shards != found.count:
            raise InvalidArgumentError(f"shards={shards}, but the store at {root.url} has "
                                       f"{found.count} shards")
        if route_by is not None and route_by != found.route_by:
            raise InvalidArgumentError(f"route_by={route_by!r}, but the store at {root.url} "
                                       f"routes by {found.route_by!r}")
        return found
    if await unfinished(root):
        raise InvalidArgumentError(f"the store at {root.url} holds shards but no shard map: a "
                                   "sharded clone or backup that did not finish (run it "
                                   "again to finish it)")
    if shards is None:
        if route_by is not None:
            raise InvalidArgumentError("route_by applies to a sharded store: pass shards= too")
        return None
    if await root.list_async(MANIFEST_PREFIX):
        raise InvalidArgumentError(f"the store at {root.url} is a plain store: it cannot be "
                                   "opened with shards=")
    return await create_shard_map(root, ShardMap.new(shards, route_by or "key"))


def shard_name(name: str, prefix: str) -> str:
    """The actor name of the Bookie of the shard at ``prefix`` (``shard-003``, or a split's
    child ``shard-003.1-e7``) in a store named ``name``: a prefix names one shard for good, so
    a handle finds the shards of any layout by name (see :mod:`.redirect`)."""
    return f"{name}.{prefix}"


def is_shard_name(name: str, actor_name: str) -> bool:
    """Whether ``actor_name`` is the Bookie of a shard of the store named ``name``, under the
    shard's name or one a move gave it (:func:`~leveled_ray.client.actor_names.moved`), and
    not one of its clerks (named ``<Bookie's name>.<role>``)."""
    return re.fullmatch(rf"{re.escape(name)}\.shard-\d+(\.[01](-e\d+)?)*(~[0-9a-f]{{8}})?",
                        actor_name) is not None
