"""The shard map of a sharded store: how many shards, the routing rule, and where each lives.

It is a small JSON object at the store's root, ``shards/<version>``, written with
create-if-absent like the manifest: version 1 when the store is created, and a new version
for each later change of layout (a split), so readers can always tell which layout they read.
Each shard is a complete store (its own manifest, Journal and Ledger) under its own prefix of
the root, ``shard-000/`` and so on. A store without a shard map is a plain store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..codec.routing import (
    PARTITIONS,
    RULE,
    check_route_by,
    check_shards,
    partition_of,
    partition_runs,
    shard_of_partition,
)
from ..errors import CorruptObjectError
from ..files.store import ObjectStore

SHARD_MAP_PREFIX = "shards/"
FORMAT = 1


def shard_map_name(version: int) -> str:
    return f"{SHARD_MAP_PREFIX}{version:020d}"


def shard_prefix(shard: int) -> str:
    """A shard's prefix under the store's root (``shard-003``)."""
    return f"shard-{shard:03d}"


@dataclass(frozen=True)
class ShardMap:
    """One version of a store's layout. ``runs[s]`` is shard ``s``'s run of partitions."""

    version: int
    route_by: str
    prefixes: tuple[str, ...]
    runs: tuple[tuple[int, int], ...]
    rule: str = RULE
    partitions: int = PARTITIONS

    @classmethod
    def new(cls, shards: int, route_by: str = "key") -> ShardMap:
        check_shards(shards)
        check_route_by(route_by)
        return cls(1, route_by, tuple(shard_prefix(s) for s in range(shards)),
                   tuple(partition_runs(shards)))

    @property
    def count(self) -> int:
        return len(self.prefixes)

    def same_layout(self, other: ShardMap) -> bool:
        """Whether ``other`` places every key where this map does, whatever its version."""
        return (self.prefixes, self.runs, self.route_by) == (
            other.prefixes, other.runs, other.route_by)

    def shard_of(self, lkey: bytes) -> int:
        """The shard that holds an object Ledger key."""
        return shard_of_partition(partition_of(lkey, self.route_by), self.runs)

    def shard_url(self, root_url: str, shard: int) -> str:
        """The URL of shard ``shard`` of the store at ``root_url``."""
        return f"{root_url.rstrip('/')}/{self.prefixes[shard]}"

    def encode(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "version": self.version, "rule": self.rule,
            "route_by": self.route_by, "partitions": self.partitions,
            "shards": [{"prefix": p, "start": start, "end": end}
                       for p, (start, end) in zip(self.prefixes, self.runs)],
        }, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, name: str) -> ShardMap:
        """The map in ``data``, or :class:`CorruptObjectError` naming ``name`` when it is
        damaged or breaks a rule (runs that do not tile the partitions in order)."""
        try:
            raw = json.loads(data)
            shards = raw["shards"]
            out = cls(int(raw["version"]), raw["route_by"],
                      tuple(str(s["prefix"]) for s in shards),
                      tuple((int(s["start"]), int(s["end"])) for s in shards),
                      raw["rule"], int(raw["partitions"]))
            ok = raw["format"] == FORMAT and out.rule == RULE and out.partitions == PARTITIONS
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptObjectError(name, 0, f"damaged shard map: {exc}") from None
        ends = [0] + [end for _, end in out.runs]
        tiled = all(start == ends[i] and end > start for i, (start, end) in enumerate(out.runs))
        if not (ok and tiled and ends[-1] == PARTITIONS and out.route_by in ("key", "bucket")
                and len(set(out.prefixes)) == out.count and out.count):
            raise CorruptObjectError(name, 0, "damaged shard map: its layout breaks the rules")
        return out


async def read_shard_map(store: ObjectStore) -> ShardMap | None:
    """The newest shard map of the store at ``store``'s root, or ``None`` (a plain store, or no
    store yet)."""
    names = sorted(m.path for m in await store.list_async(SHARD_MAP_PREFIX))
    if not names:
        return None
    name = names[-1]
    return ShardMap.decode(await store.get_async(name), name)


async def create_shard_map(store: ObjectStore, shard_map: ShardMap) -> ShardMap:
    """Create version 1 of the shard map, or return the one another creator wrote first."""
    name = shard_map_name(shard_map.version)
    if await store.put_if_absent_async(name, shard_map.encode()):
        return shard_map
    return ShardMap.decode(await store.get_async(name), name)
