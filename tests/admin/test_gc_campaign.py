"""The GC fault campaign: 5% mixed faults (5xx, lost replies, delays past the timeout, resets) on
every request, through the fault proxy in front of moto's S3 server on 127.0.0.1, while GC
passes run between writes, merges, journal compactions, checkpoints made and deleted, clones,
readers and snapshots. Some passes also find every snapshot lease unreadable, so that stopping
on doubt is exercised in every run, not only when the random faults happen to beat GC's retries.
After healing, everything that is still live reads every value it held, and every file a latest
manifest lists exists."""

from __future__ import annotations

import os
import random
import uuid

import pytest
from support.s3 import S3_BUCKET, s3_options
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest import ManifestStore
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = [pytest.mark.s3, pytest.mark.ray]

#: 24 in ``make test``; ``make soak`` runs 200 (``LR_GC_PASSES``).
PASSES = int(os.environ.get("LR_GC_PASSES", "24"))
KEYS = [f"k{i:03d}" for i in range(200)]
TIMING = dict(object_store=dict(request_timeout_s=1.0, connect_timeout_s=1.0, retry_timeout_s=10.0,
                                write_resolve_s=8.0, max_retries=8, retry_max_backoff_s=0.3))
#: A store that merges and compacts often; GC only by hand. Uploads are published within
#: half of ``gc.min_age_s`` or redone, so GC passes with that ``min_age`` race none.
SETTINGS = dict(ledger=dict(l0_max_keys=150, push_keys=50, push_ms=5, sst_max_keys=120),
                journal=dict(catalog_s=0.3, compaction_interval_s=0, small_files=8),
                gc=dict(interval_s=0, min_age_s=16.0, lease_renew_s=1.0))
MIN_AGE = 16.0
#: Passes during which every GET of a snapshot lease answers 503: each must stop, deleting nothing.
BLIND_PASSES = frozenset(range(3, PASSES, 10))


class Holders:
    """What the test knows: the values acknowledged, the keys whose last write has an unknown
    outcome, and every live point in time with the values it must read."""

    def __init__(self):
        self.acked: dict[str, bytes] = {}
        self.unknown: set[str] = set()
        self.checkpoints: dict[str, dict] = {}
        self.readers: list[tuple[object, str | None, dict]] = []  # reader, checkpoint, values
        self.snapshots: list[tuple[object, dict]] = []
        self.clones: list[tuple[str, dict]] = []
        self.errors: list[str] = []

    def now(self) -> dict:
        return {k: v for k, v in self.acked.items() if k not in self.unknown}


def act(rng: random.Random, n: int, store, url: str, options, held: Holders) -> None:
    """One step of the campaign; an object-store error is a fault the step may meet."""
    roll = rng.random()
    try:
        if roll < 0.45:
            keys = rng.sample(KEYS, 50)
            values = {k: f"{n}:{k}".encode() for k in keys}
            try:
                store.put_many([lr.Put("b", k, v) for k, v in values.items()])
                held.acked.update(values)
                held.unknown -= set(keys)
            except lr.ObjectStoreError as exc:
                if not exc.definite:
                    held.unknown |= set(keys)
        elif roll < 0.55:
            cp = store.checkpoint(lifetime=3600)
            held.checkpoints[cp.id] = held.now()
        elif roll < 0.62 and held.checkpoints:
            victim = rng.choice(sorted(held.checkpoints))
            store.delete_checkpoint(victim)
            held.checkpoints.pop(victim)  # and its readers are no longer live:
            held.readers = [r for r in held.readers if r[1] != victim]
        elif roll < 0.70:
            if held.checkpoints and rng.random() < 0.5:  # at a checkpoint ...
                cp_id = rng.choice(sorted(held.checkpoints))
                r, expected = lr.reader(url, cp_id, options=options), held.checkpoints[cp_id]
            else:  # ... or at its own, renewed while it reads
                cp_id, expected = None, held.now()
                r = lr.reader(url, options=options, lifetime=120)
            r.get("b", KEYS[0])  # opened: it reads its pinned version from now on
            held.readers.append((r, cp_id, expected))
        elif roll < 0.80:
            if held.snapshots and rng.random() < 0.5:
                snap, _ = held.snapshots.pop(rng.randrange(len(held.snapshots)))
                snap.release()
            else:
                held.snapshots.append((store.snapshot(), held.now()))
        elif roll < 0.88:
            store.compact_journal()
        elif len(held.clones) < 2:
            target = f"{url}-clone{len(held.clones)}"
            expected = held.now()
            lr.clone(url, target, options=options)
            held.clones.append((target, expected))
    except lr.ObjectStoreError as exc:
        held.errors.append(f"step {n}: {exc}")


def check_listed_files_exist(url: str, options) -> None:
    objects = ObjectStore.from_url(url, options)
    _, manifest = run_sync(ManifestStore(objects).latest())
    present = {m.path for prefix in ("ledger/", "journal/") for m in objects.list(prefix)}
    listed = {s.name for s in manifest.sst_files()} | {j.name for j in manifest.journal}
    missing = {n for n in listed if not n.startswith("@")} - present
    assert not missing, f"{url}: the manifest lists missing files {sorted(missing)[:3]}"


def reads(view, expected: dict) -> None:
    keys = sorted(expected)
    got = view.get_many([("b", k) for k in keys])
    wrong = [k for k, v in zip(keys, got) if v != expected[k]]
    assert not wrong, f"values lost or wrong: {wrong[:5]}"


def test_gc_passes_under_faults_lose_nothing(ray_cluster, moto_endpoint):
    url = f"s3://{S3_BUCKET}/campaign-{uuid.uuid4().hex[:10]}"
    direct = s3_options(moto_endpoint, **TIMING, **SETTINGS)
    rng = random.Random(int(os.environ.get("LR_CAMPAIGN_SEED", "2024")))
    held = Holders()
    with FaultProxy(moto_endpoint, rate=0.0, delay_s=1.2, seed=7) as proxy:
        options = direct.replace(object_store=dict(s3_endpoint=proxy.endpoint))
        # GC gets a small retry budget, so that some passes meet a fault they cannot ride out.
        gc_options = options.replace(object_store=dict(max_retries=1, retry_timeout_s=3.0))
        store = lr.open(url, options)
        proxy.set_faults(0.05)
        passes = deleted = 0
        stopped: set[int] = set()
        try:
            for n in range(PASSES):
                act(rng, n, store, url, options, held)
                if n in BLIND_PASSES:
                    # Far more than the pass's lease GETs, retries included; cleared after it.
                    proxy.fail_paths("GET", "/leases/snapshots-", count=1000)
                try:
                    deleted += len(lr.gc(url, min_age=MIN_AGE, options=gc_options).deleted)
                except lr.ObjectStoreError as exc:
                    assert exc.definite  # a pass that stopped deleted nothing
                    stopped.add(n)
                finally:
                    proxy.clear_paths()
                passes += 1
            proxy.heal()
            # Until a pass has something to delete (the files replaced early on are MIN_AGE
            # old): the campaign reaches a deletion however fast its passes ran.
            wait_until(lambda: lr.gc(url, min_age=MIN_AGE, options=options, dry_run=True).paths,
                       timeout=MIN_AGE + 5, interval=0.5)
            deleted += len(lr.gc(url, min_age=MIN_AGE, options=options).deleted)
            # Healed: every live point in time reads every value it held.
            reads(store, held.now())
            for snap, expected in held.snapshots:
                reads(snap, expected)
            for r, _, expected in held.readers:
                reads(r, expected)
            for cp_id, expected in held.checkpoints.items():
                with lr.reader(url, cp_id, options=direct) as r:
                    reads(r, expected)
            for clone_url, expected in held.clones:
                with lr.reader(clone_url, options=direct) as r:
                    reads(r, expected)
                check_listed_files_exist(clone_url, direct)
            check_listed_files_exist(url, direct)
        finally:
            store.close()
    print(f"GC passes {passes}, stopped on doubt {len(stopped)} ({len(stopped - BLIND_PASSES)} "
          f"by random faults), objects deleted {deleted}, faults {dict(proxy.faults)}, "
          f"step errors {len(held.errors)}")
    assert passes == PASSES and len(stopped) < PASSES // 2
    assert stopped >= BLIND_PASSES, "a pass that could not read a lease went on"
    assert deleted > 0, "the campaign never reached a deletion: it proves nothing"
    assert proxy.faults and sum(proxy.faults.values()) >= 10
