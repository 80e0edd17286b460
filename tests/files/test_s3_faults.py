"""The store on a faulty S3: moto's server behind the fault-injecting HTTP proxy on 127.0.0.1,
so the real S3 protocol and the real obstore client meet 5xx answers, lost replies, requests
delayed past the timeout and reset connections.

Each run drives every kind of conditional create (journal slots, manifest versions, fences,
checkpoints, a clone's manifest, a bulk-write commit) through the proxy, then heals it and
checks: no acknowledged write is lost, no read is wrong, no write that failed definitely is
visible, the manifest lists every file once and every listed file exists, the store never
closed, and writes go through again without a reopen.
"""

from __future__ import annotations

import time
import uuid
import zlib

import pyarrow as pa
import pytest
from support.s3 import S3_BUCKET, s3_options

import leveled_ray as lr
from leveled_ray.admin.clone import create_clone
from leveled_ray.bulk import write as bulk_write
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest import ManifestStore
from leveled_ray.manifest.model import listed_twice
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.ray]

#: Short timeouts so that a delayed request costs a second, not thirty.
TIMING = dict(object_store=dict(request_timeout_s=1.0, connect_timeout_s=1.0, retry_timeout_s=15.0,
                                write_resolve_s=10.0, max_retries=8, retry_max_backoff_s=0.5))
SMALL = dict(ledger=dict(l0_max_keys=300, push_keys=60, push_ms=5, sst_max_keys=500),
             journal=dict(catalog_s=0.3, compaction_interval_s=0), gc=dict(interval_s=0))


class Ledger:
    """What the test knows: values acknowledged, and writes that failed definitely."""

    def __init__(self):
        self.acked: dict[str, bytes] = {}
        self.never: set[str] = set()
        self.in_doubt: set[str] = set()
        self.closed_errors = 0

    def put_many(self, store, keys, tag):
        values = {k: f"{tag}:{k}".encode() for k in keys}
        try:
            store.put_many([lr.Put("b", k, v) for k, v in values.items()])
        except lr.StoreClosedError:
            self.closed_errors += 1
        except lr.ObjectStoreError as exc:
            (self.never if exc.definite else self.in_doubt).update(keys)
        else:
            self.acked.update(values)

    def check(self, read_many):
        keys = sorted(self.acked) + sorted(self.never)
        got = dict(zip(keys, read_many([("b", k) for k in keys])))
        lost = [k for k in self.acked if got[k] != self.acked[k]]
        ghosts = [k for k in self.never if got[k] is not None]
        assert not lost, f"acknowledged writes lost or wrong: {lost[:5]}"
        assert not ghosts, f"writes that failed definitely are visible: {ghosts[:5]}"


def _check_manifest(url, options):
    store = ObjectStore.from_url(url, options)
    mid, manifest = run_sync(ManifestStore(store).latest())
    assert not listed_twice(manifest)
    present = {m.path for prefix in ("ledger/", "journal/") for m in store.list(prefix)}
    listed = {s.name for s in manifest.sst_files()} | {j.name for j in manifest.journal}
    missing = {n for n in listed if not n.startswith("@")} - present
    assert not missing, f"the manifest lists files that do not exist: {sorted(missing)[:3]}"


def _bulk_rows(tag, n):
    keys = [f"bulk-{tag}-{i:05d}" for i in range(n)]
    return keys, pa.RecordBatch.from_pydict({
        "bucket": ["b"] * n, "key": keys, "value": [f"{tag}:{k}".encode() for k in keys]})


def _exercise(moto_endpoint, modes, rate, seconds):
    proxy = FaultProxy(moto_endpoint, rate=0.0, modes=modes, delay_s=1.5,
                       seed=zlib.crc32("".join(modes).encode()))
    proxy.start()
    try:
        return _run(moto_endpoint, proxy, rate, seconds)
    finally:
        proxy.stop()


def _run(moto_endpoint, proxy, rate, seconds):
    faulty = s3_options(proxy.endpoint, **TIMING, **SMALL)
    direct = s3_options(moto_endpoint, **SMALL)
    prefix = f"faults-{uuid.uuid4().hex[:10]}"
    url, clone_url = f"s3://{S3_BUCKET}/{prefix}", f"s3://{S3_BUCKET}/{prefix}-clone"
    name = f"faults-{uuid.uuid4().hex[:8]}"
    book = Ledger()
    proxy.set_faults(rate, proxy.modes)
    store = lr.open(url, faulty, name=name)  # a fence and a new writer epoch, with faults
    try:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:  # journal slots, catalog and L0 manifest versions
            book.put_many(store, [f"k{n}-{j}" for j in range(25)], "w")
            n += 1
        checkpoint = None
        for _ in range(5):  # a checkpoint: a manifest version of its own
            try:
                checkpoint = store.checkpoint(lifetime=600)
                break
            except lr.ObjectStoreError:
                continue
        keys, batch = _bulk_rows(name, 400)  # a bulk write installed through the Bookie
        try:
            plan = bulk_write.begin(url, faulty, store_name=name)
            part = bulk_write.write_partition(plan, 0, [batch])
            bulk_write.commit(plan, [part])
            book.acked.update({k: f"{name}:{k}".encode() for k in keys})
        except lr.ObjectStoreError as exc:
            if exc.definite:
                book.never.update(keys)
        try:  # a clone: the parent's checkpoint and the clone's own manifest
            run_sync(create_clone(url, clone_url, None, faulty, faulty))
            cloned = True
        except lr.ObjectStoreError:
            cloned = False
        faults = sum(proxy.faults.values())
        proxy.heal()
        if checkpoint is None:  # every try met a fault: one more, healed, so it is read below
            checkpoint = store.checkpoint(lifetime=600)
        if not cloned:  # a retried clone finishes what the faulty one began
            run_sync(create_clone(url, clone_url, None, faulty, faulty))
        book.put_many(store, [f"healed-{j}" for j in range(25)], "h")
        assert all(f"healed-{j}" in book.acked for j in range(25)), "no write after healing"
        book.check(store.get_many)
        stats = store.stats()
        assert stats["state"] == "open" and book.closed_errors == 0
    finally:
        store.close()
    _check_manifest(url, direct)
    reopened = lr.open(url, direct)  # recovery finds the same
    try:
        book.check(reopened.get_many)
    finally:
        reopened.close()
    _check_manifest(url, direct)
    with lr.reader(url, checkpoint.id, options=direct) as r:
        early = {k: v for k, v in book.acked.items() if k.startswith("k")}
        keys = sorted(early)
        assert keys and r.get_many([("b", k) for k in keys]) == [early[k] for k in keys]
    with lr.reader(clone_url, options=direct) as r:
        assert r.get("b", "k0-0") == book.acked.get("k0-0")
    return {"faults": faults, "acked": len(book.acked), "never": len(book.never),
            "in_doubt": len(book.in_doubt), "io": stats["io"], "inker": stats["inker"]}


@pytest.mark.parametrize("mode,rate", [("5xx", 0.15), ("lost", 0.15), ("delay", 0.06),
                                       ("reset", 0.15)])
def test_one_fault_mode(ray_cluster, moto_endpoint, mode, rate):
    report = _exercise(moto_endpoint, (mode,), rate, seconds=1.5)
    assert report["faults"] > 0 and report["acked"] > 0


def test_all_modes_mixed_at_five_percent(ray_cluster, moto_endpoint):
    report = _exercise(moto_endpoint, ("5xx", "lost", "delay", "reset"), 0.05, seconds=4)
    assert report["faults"] > 0 and report["acked"] > 0


def test_an_unreachable_store_fails_writes_definitely_then_recovers(ray_cluster, moto_endpoint):
    with FaultProxy(moto_endpoint) as proxy:
        options = s3_options(proxy.endpoint, **TIMING,
                             **SMALL).replace(object_store=dict(retry_timeout_s=3.0))
        url = f"s3://{S3_BUCKET}/unreachable-{uuid.uuid4().hex[:10]}"
        store = lr.open(url, options)
        try:
            store.put("b", "before", b"1")
            proxy.refuse()
            for key in ("down-1", "down-2"):
                started = time.monotonic()
                with pytest.raises(lr.ObjectStoreError) as err:
                    store.put("b", key, b"x")
                assert err.value.definite  # refused connections: never sent
                assert time.monotonic() - started < options.object_store.retry_timeout_s + 5
            proxy.heal()
            store.put("b", "after", b"2")  # no reopen
            assert store.get_many([("b", "before"), ("b", "down-1"), ("b", "after")]) == [
                b"1", None, b"2"]
            assert store.stats()["state"] == "open"
        finally:
            store.close()
