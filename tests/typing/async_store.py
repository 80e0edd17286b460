"""The awaitable twins, in an asyncio application."""

from __future__ import annotations

from typing import assert_type

import leveled_ray as lr


async def app(url: str) -> None:
    store = lr.open(url)
    sqn = await store.put_async("b", "k", b"v")
    assert_type(sqn, int)
    assert_type(await store.get_async("b", "k"), bytes | None)
    assert_type(await store.get_many_async([("b", "k")]), list[bytes | None])
    assert_type(await store.put_many_async([lr.Put("b", "k2", b"v")]), list[int])
    async for bucket, key in store.fold_keys_async("b"):
        print(bucket, key)
    async for change in store.changes_async(0):
        print(change)
    snap = await store.snapshot_async()
    assert_type(await snap.get_async("b", "k"), bytes | None)
    await snap.release_async()
    assert_type(await store.checkpoint_async(), lr.Checkpoint)
    await store.close_async()


async def sharded_app(url: str) -> None:
    store = lr.open(url, shards=2)
    await store.split_shard_async(0)
    moves: list[dict[str, object]] = await store.rebalance_async()
    assert moves is not None
    await store.close_async()
