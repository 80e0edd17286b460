"""Merges and deletes through real Ray actors on memory://, file:// and s3:// (moto)."""

import random

import pytest
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.files.names import journal_slot_of
from leveled_ray.files.store import ObjectStore
from leveled_ray.read.store_reader import open_reader

pytestmark = pytest.mark.ray


def test_merges_keep_every_value_and_delete_replaced_files(ray_cluster, s3_backend):
    url, options = s3_backend
    options = options.replace(ledger=dict(l0_max_keys=400, push_keys=100, push_ms=5,
                                          sst_max_keys=300))
    store = lr.open(url, options)
    rng = random.Random(5)
    model = {}
    try:
        for r in range(12):
            items = []
            for _ in range(250):
                k = f"k{rng.randrange(1500):05d}"
                if rng.random() < 0.15:
                    items.append(lr.Delete("b", k))
                    model[k] = None
                else:
                    model[k] = b"%d" % r
                    items.append(lr.Put("b", k, model[k]))
            store.put_many(items)

        def settled():
            s = store.stats()
            p = s["penciller"]
            return (p["ledger_sqn"] >= s["durable_sqn"] - 400 and not p["merging"]
                    and s["clerks"].get("delete_pending", 0) == 0 and s["merges"]["merges"] > 0)

        wait_until(settled, timeout=120)
        stats = store.stats()
        assert stats["files_deleted"] > 0
        keys = sorted(model)
        assert dict(zip(keys, store.get_many([("b", k) for k in keys]))) == model
        # Once merges and deletes have converged, only the files the manifest holds are left
        # in the object store.
        objects = ObjectStore.from_url(url, options)

        def converged():
            files = {f.name for level in open_reader(url, options).manifest.levels
                     for f in level}
            return files and files == {m.path for m in objects.list("ledger/")}

        wait_until(converged, timeout=120, interval=0.5)
    finally:
        store.close()


def test_journal_compaction_through_ray(ray_cluster, s3_backend):
    url, options = s3_backend
    options = options.replace(ledger=dict(l0_max_keys=200, push_keys=50, push_ms=5,
                                          sst_max_keys=150), journal=dict(compaction_interval_s=0))
    store = lr.open(url, options)
    objects = ObjectStore.from_url(url, options)
    try:
        for r in range(10):  # each round replaces every key: old journal files are mostly dead
            store.put_many([lr.Put("b", f"k{i:04d}", b"round %d" % r) for i in range(300)])
        wait_until(lambda: store.stats()["penciller"]["ledger_sqn"] >= 2400, timeout=60)
        before = {m.path for m in objects.list("journal/")}
        assert store.compact_journal() == "started"
        wait_until(lambda: store.stats()["inker"]["compactions"] >= 1, timeout=60)
        store.put("b", "after", b"written after the compaction")

        def converged():
            manifest = open_reader(url, options).manifest
            expected = {j.name for j in manifest.journal}
            listed = {m.path for m in objects.list("journal/")}
            tail = {p for p in listed if (journal_slot_of(p) or -1) >= manifest.journal_next_slot}
            return listed == expected | tail

        wait_until(converged, timeout=120, interval=0.5)
        assert len({m.path for m in objects.list("journal/")} & before) < len(before)
        keys = [("b", f"k{i:04d}") for i in range(300)]
        assert store.get_many(keys) == [b"round 9"] * 300
        assert store.get("b", "after") == b"written after the compaction"
    finally:
        store.close()
    reopened = lr.open(url, options)  # the compacted Journal and the Ledger agree after restart
    try:
        assert reopened.get_many(keys) == [b"round 9"] * 300
    finally:
        reopened.close()
