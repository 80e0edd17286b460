"""A sharded store: the same calls as a plain one, and the sharded handle's own."""

from __future__ import annotations

from typing import assert_type

import leveled_ray as lr
from leveled_ray.manifest.shard_map import ShardMap


def sharded(url: str) -> None:
    store = lr.open(url, shards=4, name="orders")
    assert_type(store, lr.ShardedStore)
    store.put_many([lr.Put("orders", f"o{i}", b"v") for i in range(100)])
    assert_type(store.get("orders", "o1"), bytes | None)
    assert_type(store.split_shard(0), ShardMap)
    store.move_shard(1, "node-id")
    moves: list[dict[str, object]] = store.rebalance()
    assert moves is not None
    with store.snapshot() as snap:
        assert_type(snap.get_many([("orders", "o1")]), list[bytes | None])
    store.close()


def either_layout(url: str) -> bytes | None:
    """``lr.open`` without ``shards`` answers whichever layout is at the URL: every call a
    user makes is on both."""
    store = lr.open(url)
    try:
        store.put("b", "k", b"v")
        with store.snapshot() as snap:
            return snap.get("b", "k")
    finally:
        store.close()


def connected(name: str) -> None:
    store = lr.connect(name)
    assert_type(store.get_many([("b", "k")]), list[bytes | None])
    admin = lr.admin("file:///tmp/db")
    assert_type(admin.list_checkpoints(), list[lr.Checkpoint])
