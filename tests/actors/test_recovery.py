"""Recovery: after every actor is killed, reopening finds every acknowledged write."""

import asyncio

import pytest
from support.stores import persisted
from support.waits import wait_until

import leveled_ray as lr

pytestmark = pytest.mark.ray


def kill_all(store, ray):
    for actor in store.actors():
        ray.kill(actor, no_restart=True)


def test_kill_every_actor_then_reopen(ray_cluster, s3_backend):
    url, options = s3_backend
    options = options.replace(ledger=dict(l0_max_keys=500, push_keys=100, push_ms=5),
                              journal=dict(catalog_files=3))
    store = lr.open(url, options)
    expected = {}
    sqns = store.put_many([lr.Put("b", f"k{i}", b"first %d" % i) for i in range(1200)])
    expected.update({f"k{i}": b"first %d" % i for i in range(1200)})
    wait_until(lambda: persisted(store, sqns[-1]))  # some changes are in SSTs ...

    async def concurrent(calls):
        await asyncio.gather(*calls)
    # ... and some only in the Journal (concurrent calls, which share journal writes)
    asyncio.run(concurrent(store.put_async("b", f"k{i}", b"second %d" % i)
                           for i in range(0, 1200, 3)))
    expected.update({f"k{i}": b"second %d" % i for i in range(0, 1200, 3)})
    asyncio.run(concurrent(store.delete_async("b", f"k{i}") for i in range(0, 1200, 7)))
    expected.update({f"k{i}": None for i in range(0, 1200, 7)})
    asyncio.run(concurrent(store.put_async("c", f"x{i}", b"c") for i in range(100)))
    expected.update({f"x{i}": b"c" for i in range(100)})
    kill_all(store, ray_cluster)

    reopened = lr.open(url, options)
    try:
        assert reopened.open_info["replayed"] > 0
        keys = [("c" if k.startswith("x") else "b", k) for k in expected]
        assert dict(zip(expected, reopened.get_many(keys))) == expected
    finally:
        reopened.close()


def test_recovery_twice_in_a_row(ray_cluster, tmp_url):
    store = lr.open(tmp_url)
    store.put("b", "k", b"v1")
    kill_all(store, ray_cluster)
    store = lr.open(tmp_url)
    store.put("b", "k2", b"v2")
    kill_all(store, ray_cluster)
    store = lr.open(tmp_url)
    try:
        assert store.get_many([("b", "k"), ("b", "k2")]) == [b"v1", b"v2"]
        assert store.stats()["epoch"] == 3
    finally:
        store.close()
