"""GC never deletes on doubt: a pass whose needed reads fail stops with a typed error and deletes
nothing, and space comes back as soon as the running store's lease says nothing needs it.
On moto's S3 server behind the fault proxy (127.0.0.1), with a real store on Ray."""

from __future__ import annotations

import uuid

import pytest
from support.s3 import S3_BUCKET, s3_options
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.files.names import manifest_name
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest import ManifestStore
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.ray]

KEYS = [("b", f"k{i:05d}") for i in range(2000)]
#: Short timeouts, and the retry budget of the finding: a request is tried three times.
TIMING = dict(object_store=dict(request_timeout_s=2.0, connect_timeout_s=1.0, retry_timeout_s=10.0,
                                max_retries=2, retry_max_backoff_s=0.2), gc=dict(interval_s=0))


def everything(objects: ObjectStore) -> set[str]:
    return {m.path for prefix in ("manifest/", "ledger/", "journal/", "leases/")
            for m in objects.list(prefix)}


def referenced_by(objects: ObjectStore, manifest_id: int) -> set[str]:
    m = run_sync(ManifestStore(objects).read(manifest_id))
    return {s.name for s in m.sst_files()} | {j.name for j in m.journal}


def fill(store, rounds: int) -> None:
    for r in range(rounds):
        store.put_many([lr.Put(b, k, f"round {r}".encode()) for b, k in KEYS])


def test_gc_keeps_a_checkpoint_whose_manifest_cannot_be_read(ray_cluster, moto_endpoint):
    url = f"s3://{S3_BUCKET}/gc-{uuid.uuid4().hex[:12]}"
    direct = s3_options(moto_endpoint, **SMALL, **TIMING)
    objects = ObjectStore.from_url(url, direct)
    with FaultProxy(moto_endpoint, seed=24) as proxy:
        options = direct.replace(object_store=dict(s3_endpoint=proxy.endpoint))
        # 1. A checkpoint, then every key overwritten four times and the journal compacted.
        store = lr.open(url, options)
        try:
            fill(store, 1)
            checkpoint = store.checkpoint()
            fill(store, 5)
            wait_until(lambda: store.stats()["penciller"]["ledger_sqn"] >= 12_000, timeout=120)
            store.compact_journal()
            wait_until(lambda: store.stats()["inker"]["compactions"] >= 1, timeout=120)
        finally:
            store.close()
        only_pinned = referenced_by(objects, checkpoint.manifest_id) - referenced_by(
            objects, run_sync(ManifestStore(objects).latest()).id)
        assert only_pinned  # the checkpoint is what keeps these
        # 2. Every GET of the checkpoint's manifest version answers 503: all three attempts.
        before = everything(objects)
        proxy.fail_paths("GET", manifest_name(checkpoint.manifest_id), count=3)
        with pytest.raises(lr.ObjectStoreError) as stopped:
            lr.admin(url, options).gc(min_age=0)
        assert stopped.value.definite and "deleted nothing" in str(stopped.value)
        assert everything(objects) == before  # 3. nothing was deleted
        # 4. The checkpoint reads every value it held; a pass without faults keeps it too.
        plan = lr.admin(url, options).gc(min_age=0)
        assert plan.paths and only_pinned <= everything(objects)
        with lr.reader(url, checkpoint.id, options=options) as r:
            assert r.get_many(KEYS) == [b"round 0"] * len(KEYS)

        # Space comes back without a wait: the store is open, the checkpoint deleted, and one
        # pass frees what only the checkpoint needed (the running store's lease says so).
        store = lr.open(url, options)
        try:
            snap = store.snapshot()
            fill(store, 1)
            store.delete_checkpoint(checkpoint.id)
            lr.gc(url, min_age=0, options=options)
            assert not only_pinned & everything(objects)
            assert snap.get_many(KEYS) == [b"round 4"] * len(KEYS)  # its files stayed
            assert store.get_many(KEYS[:10]) == [b"round 0"] * 10
            snap.release()
        finally:
            store.close()
        # A missing version that a live checkpoint pins is damage, named, and GC stops.
        pin = lr.admin(url, options).create_checkpoint()
        objects.delete(manifest_name(pin.manifest_id))
        before = everything(objects)
        with pytest.raises(lr.CorruptObjectError) as damaged:
            lr.gc(url, min_age=0, options=options)
        assert damaged.value.path == manifest_name(pin.manifest_id)
        assert everything(objects) == before
        with pytest.raises(lr.CorruptObjectError) as damaged:
            lr.reader(url, pin.id, options=options).get(*KEYS[0])
        assert damaged.value.path == manifest_name(pin.manifest_id)
