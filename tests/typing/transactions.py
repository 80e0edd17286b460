"""Transactions on the plain and the sharded handles, sync and async, as the guide uses them."""

from __future__ import annotations

from typing import assert_type

import leveled_ray as lr


def transfer(t: lr.Transaction, amount: int) -> int:
    a = int(t.get("acct", "alice") or b"0")
    b = int(t.get("acct", "bob") or b"0")
    t.put("acct", "alice", b"%d" % (a - amount))
    t.put("acct", "bob", b"%d" % (b + amount))
    return a - amount


def tour(url: str) -> None:
    store = lr.open(url)
    with store.transaction(isolation="snapshot") as t:
        assert_type(t.get_many([("acct", "alice"), ("acct", "bob")]), list[bytes | None])
        assert_type(t.head("acct", "alice"), lr.Head | None)
        for bucket, key, head in t.fold_heads("acct", "a", "c"):
            print(bucket, key, head.sqn)
        t.delete("acct", "carol")
    assert_type(store.run_transaction(lambda t: transfer(t, 10), retries=5), int)
    sharded = lr.open(url + "-sharded", shards=4)
    t = sharded.transaction(lifetime_s=5.0)
    try:
        t.index_query("acct", "city_bin", "a", "z")
        t.commit()
    except lr.ConflictError:
        t.rollback()
    assert_type(sharded.run_transaction(lambda t: transfer(t, 1)), int)


async def tour_async(store: lr.Store | lr.ShardedStore) -> None:
    async def move(t: lr.Transaction) -> bytes | None:
        t.put("acct", "alice", b"1")
        return await t.get_async("acct", "bob")

    assert_type(await store.run_transaction_async(move), bytes | None)
    async with store.transaction() as t:
        rows = await t.fold_objects_async("acct")
        assert_type(rows, list[tuple[str | bytes, str | bytes, bytes]])
        await t.commit_async()
