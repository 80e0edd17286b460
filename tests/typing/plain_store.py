"""A plain store, synchronous calls, as the guides use it."""

from __future__ import annotations

from typing import assert_type

import leveled_ray as lr


def tour(url: str) -> None:
    store = lr.open(url)
    sqn = store.put("users", "alice", b"v", indexes=[("add", "city_bin", "paris")], ttl=60.0)
    assert_type(sqn, int)
    assert_type(store.get("users", "alice"), bytes | None)
    assert_type(store.head("users", "alice"), lr.Head | None)
    assert_type(store.put_many([lr.Put("users", "u1", b"v"), lr.Delete("users", "u2")]),
                list[int])
    assert_type(store.get_many([("users", "u1"), ("users", "u2")]), list[bytes | None])
    store.put("users", "alice", b"v2", if_sqn=sqn)
    store.delete("users", "u1", if_sqn=None)
    keys: list[object] = list(store.index_query("users", "city_bin", "paris", "paris"))
    assert keys is not None
    for bucket, key in store.fold_keys("users"):
        print(bucket, key)
    with store.snapshot() as snap:
        assert_type(snap.get("users", "alice"), bytes | None)
        earlier = snap.go_back(at_sqn=sqn)
        earlier.release()
    cp = store.checkpoint(lifetime=3600)
    assert_type(cp, lr.Checkpoint)
    assert_type(store.list_checkpoints(), list[lr.Checkpoint])
    for change in store.changes(0, values=False):
        print(change)
    stats: dict[str, object] = store.stats()
    assert stats
    done: dict[str, object] = store.backup(url + "-backup", progress=False)
    assert done
    store.close()


def from_elsewhere(url: str, checkpoint: str) -> bytes | None:
    reader = lr.reader(url, checkpoint)
    with reader:
        assert_type(reader.get_many([("users", "alice")]), list[bytes | None])
        return reader.get("users", "alice")


def at_rest(url: str) -> None:
    admin = lr.admin(url)
    cp = admin.create_checkpoint(lifetime=60.0, name="nightly")
    admin.refresh_checkpoint(cp.id, lifetime=120.0)
    admin.delete_checkpoint(cp.id)
    plan = lr.gc(url, dry_run=True)
    assert plan is not None
    assert_type(lr.destroy(url, soft=True), int)
