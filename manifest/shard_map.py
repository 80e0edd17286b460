"""The shard map of a sharded store: how many shards, the routing rule, and where each lives.

It is a small JSON object at the store's root, ``shards/<version>``, written with
create-if-absent like the manifest: version 1 when the store is created, and a new version
for each later change of layout (a split), so readers can always tell which layout they read.
Each shard is a complete store (its own manifest, Journal and Ledger) under its own prefix of
the root, ``shard-000/`` and so on. A store without a shard map is a plain store.

Each shard has a *label*, its name in positions (``{"0": sqn, "1": sqn}``): ``"0"`` to
``"n-1"`` when the store is made, and ``"<parent>.0"``, ``"<parent>.1"`` for the two children of
a split (:meth:`ShardMap.split`). A child's SQNs go on from its parent's, so a position taken
before a split still says where to read on: its parent's SQN stands for each child's
(:meth:`ShardMap.sqns_of`).
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from ..errors import CorruptObjectError, InvalidArgumentError, ObjectStoreError
from ..files.store import ObjectStore
from .history import check_position

SHARD_MAP_PREFIX = "shards/"
FORMAT = 1


def shard_map_name(version: int) -> str:
    return f"{SHARD_MAP_PREFIX}{version:020d}"


#: Where a sharded clone or backup marks the root it makes a store at, until that store's
#: shard map (written last) is there: an open refuses such a root, and only running the clone
#: or backup again finishes it.
UNFINISHED_PREFIX = "unfinished/"


def shard_prefix(shard: int) -> str:
    """A shard's prefix under the store's root (``shard-003``)."""
    return f"shard-{shard:03d}"


async def mark_unfinished(root: ObjectStore, maker: str) -> None:
    """Mark ``root`` as being made by ``maker`` (``"clone"``, ``"backup"``)."""
    await root.put_async(UNFINISHED_PREFIX + maker, b"")


async def unmark_unfinished(root: ObjectStore, maker: str) -> None:
    """Drop ``maker``'s mark, once the shard map is written (a mark left then is harmless:
    the shard map is what an open reads)."""
    with contextlib.suppress(ObjectStoreError):
        await root.delete_async(UNFINISHED_PREFIX + maker)


async def unfinished(root: ObjectStore) -> bool:
    """Whether a sharded clone or backup marked ``root`` (see :data:`UNFINISHED_PREFIX`)."""
    return bool(await root.list_async(UNFINISHED_PREFIX))


@dataclass(frozen=True)
class ShardMap:
    """One version of a store's layout. ``runs[s]`` is shard ``s``'s run of partitions and
    ``labels[s]`` its name in positions (by default ``str(s)``)."""

    version: int
    route_by: str
    prefixes: tuple[str, ...]
    runs: tuple[tuple[int, int], ...]
    rule: str = RULE
    partitions: int = PARTITIONS
    labels: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.labels:
            object.__setattr__(self, "labels", tuple(str(s) for s in range(len(self.prefixes))))

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
        return (self.prefixes, self.runs, self.route_by, self.labels) == (
            other.prefixes, other.runs, other.route_by, other.labels)

    def shard_of(self, lkey: bytes) -> int:
        """The shard that holds an object Ledger key."""
        return shard_of_partition(partition_of(lkey, self.route_by), self.runs)

    def shard_url(self, root_url: str, shard: int) -> str:
        """The URL of shard ``shard`` of the store at ``root_url``."""
        return f"{root_url.rstrip('/')}/{self.prefixes[shard]}"

    def split(self, shard: int, tag: str = "") -> ShardMap:
        """The next version, where shard ``shard`` is two children, each with half its run
        of partitions (the lower half first), under labels of their own and prefixes that
        end with ``tag`` (a split names its children after its attempt)."""
        if not (isinstance(shard, int) and not isinstance(shard, bool) and 0 <= shard < self.count):
            raise InvalidArgumentError(f"no shard {shard!r}: the store has {self.count}")
        start, end = self.runs[shard]
        if end - start < 2:
            raise InvalidArgumentError(f"shard {shard} owns one partition: it cannot split")
        middle = (start + end) // 2

        def spliced(items, pair):
            return items[:shard] + tuple(pair) + items[shard + 1:]

        prefix, label = self.prefixes[shard], self.labels[shard]
        return dataclasses.replace(
            self, version=self.version + 1,
            prefixes=spliced(self.prefixes, (f"{prefix}.0{tag}", f"{prefix}.1{tag}")),
            runs=spliced(self.runs, ((start, middle), (middle, end))),
            labels=spliced(self.labels, (f"{label}.0", f"{label}.1")))

    def position(self, sqns) -> dict[str, int]:
        """A position (``{label: sqn}``) from each shard's SQN, in shard order."""
        return {label: int(sqn) for label, sqn in zip(self.labels, sqns, strict=True)}

    def sqns_of(self, position, name: str = "after") -> list[int] | None:
        """Each shard's SQN in ``position``: see :func:`position_sqns`."""
        return position_sqns(position, self.labels, name)

    def encode(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "version": self.version, "rule": self.rule,
            "route_by": self.route_by, "partitions": self.partitions,
            "shards": [{"prefix": p, "start": start, "end": end, "label": label}
                       for p, (start, end), label in zip(self.prefixes, self.runs,
                                                         self.labels)],
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
                      raw["rule"], int(raw["partitions"]),
                      tuple(str(s.get("label", i)) for i, s in enumerate(shards)))
            ok = raw["format"] == FORMAT and out.rule == RULE and out.partitions == PARTITIONS
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptObjectError(name, 0, f"damaged shard map: {exc}") from None
        ends = [0] + [end for _, end in out.runs]
        tiled = all(start == ends[i] and end > start for i, (start, end) in enumerate(out.runs))
        if not (ok and tiled and ends[-1] == PARTITIONS and out.route_by in ("key", "bucket")
                and len(set(out.prefixes)) == out.count and out.count
                and len(set(out.labels)) == out.count):
            raise CorruptObjectError(name, 0, "damaged shard map: its layout breaks the rules")
        return out


def position_sqns(position, labels, name: str = "after") -> list[int] | None:
    """Each shard's SQN in ``position``, for the shards ``labels`` (in shard order; an int
    ``n`` stands for ``"0"`` to ``"n-1"``). ``0`` stands for every shard's first change, and
    ``None`` for none given. A shard missing from a position taken before it was split off
    gets its nearest ancestor's SQN. Refused (:class:`InvalidArgumentError`) when a shard has
    no SQN, or when a label is neither a shard's nor an ancestor's (a position of another
    store, or of a newer layout)."""
    if isinstance(labels, int):
        labels = [str(s) for s in range(labels)]
    if position is None or position == 0 and not isinstance(position, bool):
        return None if position is None else [0] * len(labels)

    def covers(k, label):
        return isinstance(k, str) and (k == label or label.startswith(k + "."))

    refused = not isinstance(position, dict) or any(
        not any(covers(k, label) for label in labels) for k in position)
    found = [] if refused else [[k for k in position if covers(k, lb)] for lb in labels]
    if refused or not all(found):
        shown = ", ".join(f'"{label}": sqn' for label in labels[:3])
        more = ", ..." if len(labels) > 3 else ""
        raise InvalidArgumentError(f"{name} must be a position of every shard, "
                                   f"{{{shown}{more}}}, not {position!r}")
    return [check_position(position[max(keys, key=len)]) for keys in found]


async def read_shard_map(store: ObjectStore) -> ShardMap | None:
    """The newest shard map of the store at ``store``'s root, or ``None`` (a plain store, or no
    store yet)."""
    names = sorted(m.path for m in await store.list_async(SHARD_MAP_PREFIX))
    if not names:
        return None
    name = names[-1]
    return ShardMap.decode(await store.get_async(name), name)


async def retired_prefixes(store: ObjectStore, current: ShardMap) -> list[str]:
    """The prefixes of shards that splits retired: in an older version of the shard map,
    not in ``current``."""
    held, out = set(current.prefixes), []
    for meta in sorted(await store.list_async(SHARD_MAP_PREFIX), key=lambda m: m.path):
        older = ShardMap.decode(await store.get_async(meta.path), meta.path)
        out += [p for p in older.prefixes if p not in held and p not in out]
    return out


async def create_shard_map(store: ObjectStore, shard_map: ShardMap) -> ShardMap:
    """Create version ``shard_map.version`` of the shard map (1 when the store is made), or
    return the one another creator wrote there first."""
    name = shard_map_name(shard_map.version)
    if await store.put_if_absent_async(name, shard_map.encode()):
        return shard_map
    return ShardMap.decode(await store.get_async(name), name)
