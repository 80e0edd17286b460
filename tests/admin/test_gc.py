"""Garbage collection: the keep/delete rules as pure functions (no Ray), then whole passes and
destroy on file:// and s3:// (moto) with a real store."""

import time

import pytest
from support.stores import SMALL, current_files, stored
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.admin import gc as gcm
from leveled_ray.clock import ManualClock
from leveled_ray.files.backends import ObjectMeta
from leveled_ray.files.journal import JournalInfo
from leveled_ray.files.names import journal_slot_name, manifest_name, sst_name, ulid
from leveled_ray.files.sst import SstInfo
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest import Checkpoint, Manifest
from leveled_ray.manifest import snapshot_leases as sl

NOW = 1_000_000.0
DAY = 86_400.0


def sst(name):
    return SstInfo(name, 10, 1, 0, b"a", b"z", 1, 1)


def journal(slot):
    return JournalInfo(journal_slot_name(slot), slot, 1, 0, 10, 1, slot + 1, slot + 1)


def everything(objects) -> set[str]:
    return {m.path for prefix in ("manifest/", "ledger/", "journal/")
            for m in objects.list(prefix)}


def meta(path, age):
    return ObjectMeta(path, 10, NOW - age)


def test_what_a_pass_keeps_and_deletes():
    current, pinned, orphan, young, old_only = (f"ledger/{n}.sst" for n in "ABCDE")
    v1 = Manifest.new().with_changes(levels=((sst(pinned), sst(old_only)),),
                                     journal=(journal(0),), journal_next_slot=1)
    v2 = v1.with_changes(levels=((sst(pinned),),))
    v3 = v2.with_changes(levels=((sst(current),),), journal=(journal(0), journal(1)),
                         journal_next_slot=2,
                         checkpoints=(Checkpoint("c", 2, None, 0.0),))
    listing = [meta(manifest_name(1), 3 * DAY), meta(manifest_name(2), 2 * DAY),
               meta(manifest_name(3), DAY),
               *(meta(p, 3 * DAY) for p in (current, pinned, orphan, old_only)),
               meta(young, 10), meta(journal_slot_name(0), 3 * DAY),
               meta(journal_slot_name(1), 3 * DAY), meta(journal_slot_name(2), 3 * DAY)]
    window, min_age = 3600.0, 600.0
    needed = gcm.needed_versions(listing, (3, v3), NOW, min_age, window)
    assert set(needed) == {2, 3}  # the newest, and the checkpoint's; v1 stopped being current
    plan = gcm.plan(listing, gcm.Known((3, v3), {}, {2: v2, 3: v3}, needed), NOW, min_age,
                    grace=min_age)
    assert sorted(plan.files) == [orphan, old_only]
    assert plan.manifests == [manifest_name(1)]
    assert plan.kept["journal tail"] == 1 and plan.kept["young"] == 1
    # A version that was current within the window stays with its files (a snapshot's).
    recent = [m if m.path != manifest_name(2) else meta(manifest_name(2), 60) for m in listing]
    recent = [m if m.path != manifest_name(3) else meta(manifest_name(3), 30) for m in recent]
    assert 1 in gcm.needed_versions(recent, (3, v3.with_changes(checkpoints=())), NOW, min_age,
                                    window=120.0)


def test_a_snapshots_journal_tail_outlives_its_compaction():
    """A snapshot reads the journal slots its writer had written but not yet recorded when it
    was taken (its tail). Recorded and then compacted away later, they are in no kept version,
    yet stay while the snapshot's lease holds them, and go once it has ended."""
    v1 = Manifest.new().with_changes(journal=(journal(0),), journal_next_slot=1)
    v3 = v1.with_changes(journal=(journal(3),), journal_next_slot=4)  # 0-2 compacted into 3
    listing = [meta(manifest_name(1), DAY), meta(manifest_name(3), DAY),
               *(meta(journal_slot_name(slot), DAY) for slot in range(4))]

    def deleted(expires):
        lease = sl.SnapshotLease(epoch=1, written_at=NOW, renew_s=10.0, max_timeout_s=100.0,
                                 floors=(3, 3), snapshots=((1, 1, 3, expires),))
        needs = gcm.needed_versions(listing, (3, v3), NOW, 600.0, 0.0, {1: lease})
        versions = {mid: m for mid, m in ((1, v1), (3, v3)) if mid in needs}
        plan = gcm.plan(listing, gcm.Known((3, v3), {1: lease}, versions, needs), NOW, 600.0,
                        grace=600.0)
        return sorted(plan.files), plan.kept

    files, kept = deleted(expires=NOW + 100)
    assert files == [] and kept["a snapshot's journal tail"] == 2
    files, _ = deleted(expires=NOW - 1)
    assert files == [journal_slot_name(slot) for slot in range(3)]


def test_a_plan_with_a_doubt_deletes_nothing():
    """Whatever else it proved, a pass that could not read something it needed (a lease, a
    version) plans no delete, and says why."""
    orphan = "ledger/X.sst"
    v1 = Manifest.new()
    listing = [meta(manifest_name(1), 3 * DAY), meta(orphan, 3 * DAY)]
    known = gcm.Known((1, v1), {}, {1: v1},
                      gcm.needed_versions(listing, (1, v1), NOW, 600.0, 3600.0))
    assert gcm.plan(listing, known, NOW, 600.0, grace=600.0).files == [orphan]
    doubted = gcm.plan(listing, known, NOW, 600.0, grace=600.0,
                       doubts=["a snapshot lease could not be read"])
    assert doubted.paths == [] and doubted.doubts == ("a snapshot lease could not be read",)


def test_a_version_stays_until_its_successor_is_old_enough_to_tell_a_re_creation():
    """Whatever min_age: a writer with an older cached version could re-create a deleted id,
    and tells so only by creation times (whole seconds on S3)."""
    m = Manifest.new()

    def kept(successor_age, closed=False):
        listing = [meta(manifest_name(1), DAY), meta(manifest_name(2), successor_age)]
        lease = sl.SnapshotLease(epoch=0, written_at=NOW, renew_s=10.0, max_timeout_s=100.0,
                                 floors=(2, 2), closed=closed)
        return set(gcm.needed_versions(listing, (2, m), NOW, 0.0, 0.0, {0: lease}))

    assert kept(gcm.RECREATE_GUARD_S - 1) == {1, 2}
    assert kept(gcm.RECREATE_GUARD_S + 1) == {2}
    assert kept(gcm.RECREATE_GUARD_S - 1, closed=True) == {2}  # no writer holds an old one

    def files_kept(successor_age):  # the guarded version's object only (no lease: a writer
        listing = [meta(manifest_name(1), DAY), meta(manifest_name(2), successor_age)]
        return gcm.needed_versions(listing, (2, m), NOW, 0.0, 0.0)[1]  # may be opening)

    assert files_kept(gcm.RECREATE_GUARD_S - 1) == frozenset()


def test_a_destroyed_store_goes_after_its_grace_period():
    m = Manifest.new().with_changes(levels=((sst("ledger/A.sst"),),), destroyed_at=NOW - 100)
    listing = [meta(manifest_name(0), DAY), meta(manifest_name(1), DAY),
               meta("ledger/A.sst", DAY), meta(journal_slot_name(0), 1)]
    early = gcm.plan(listing, gcm.Known((1, m), {}, {1: m}), NOW, 600, grace=1000)
    assert early.files == [] and early.manifests == [manifest_name(0)]  # an ordinary old one
    plan = gcm.plan(listing, gcm.Known((1, m), {}, {1: m}), NOW, 600, grace=50)
    assert sorted(plan.files) == ["journal/00000000000000000000.jnl", "ledger/A.sst"]
    assert plan.manifests == [manifest_name(0), manifest_name(1)]  # the newest last
    kept = m.with_changes(checkpoints=(Checkpoint("c", 1, None, 0.0),))
    assert gcm.plan(listing, gcm.Known((1, kept), {}, {1: kept}), NOW, 600, grace=50).files == []


def test_old_outputs_are_not_published():
    options = lr.Options(gc=dict(min_age_s=100))
    gcm.check_publishable(NOW, options, NOW + 49)
    with pytest.raises(lr.ObjectStoreError):
        gcm.check_publishable(NOW, options, NOW + 51)
    assert abs(gcm.named_at([sst_name(), sst_name()]) - time.time()) < 1  # named just now


def test_a_running_writers_uploads_outlive_a_small_min_age():
    """``min_age=0`` on a running store keeps what its writer may still publish: unreferenced
    files named since its oldest upload in flight began (its lease's ``uploads_since``, less
    the clock skew allowed) and younger than its publish window. Older orphans, and every
    orphan once the lease is closed, go; a writer with no lease yet keeps its window."""
    m = Manifest.new().with_changes(writer_epoch=1)
    named = {when: f"ledger/{ulid(NOW - when)}.sst" for when in (30, 60, 300)}
    before, old = named[60], named[300]
    listing = [meta(manifest_name(0), DAY), *(meta(path, when) for when, path in named.items())]

    def plan(**lease):
        leases = {} if not lease else {1: sl.SnapshotLease(
            epoch=1, written_at=NOW - 1, renew_s=10.0, max_timeout_s=100.0, floors=(0, 0),
            publish_s=120.0, **lease)}
        return gcm.plan(listing, gcm.Known((0, m), leases, {0: m}), NOW, 0.0, grace=0.0,
                        publish_window=100.0)

    running = plan(uploads_since=NOW - 30 + sl.CLOCK_SKEW_S)
    assert sorted(running.files) == sorted([before, old])
    assert running.kept["its writer may publish it"] == 1
    assert sorted(plan(uploads_since=NOW - 1000).files) == [old]  # beyond the publish window
    assert sorted(plan(uploads_since=NOW, closed=True).files) == sorted(named.values())
    assert plan().files == [old]  # no lease yet: the GC's own window


def settled(store, sqn: int) -> None:
    """Wait until the Ledger holds ``sqn`` and no merge runs. The test's clock jumps past GC's
    min_age in one step: a flush or merge between its publish check and its commit would see
    no time pass and publish an output GC just collected (``gc.check_publishable`` bounds the
    time between them, which a jump of the clock skips)."""
    wait_until(lambda: (stats := store.stats()["penciller"])["ledger_sqn"] >= sqn
               and not stats["merging"], timeout=30)


@pytest.mark.ray
def test_gc_keeps_what_checkpoints_and_snapshots_need(ray_cluster, s3_backend):
    url, options = s3_backend
    # Outputs older than gc.min_age_s / 2 by the store's clock are not published: merges that
    # the advancing clock overtakes are redone, never collected half-published.
    options = options.replace(**SMALL, gc=dict(long_snapshot_timeout_s=60, interval_s=0,
                                               min_age_s=4))
    clock = ManualClock()
    store = lr.open(url, options, clock=clock)
    objects = ObjectStore.from_url(url, options)
    try:
        store.put_many([lr.Put("b", f"k{i:04d}", b"first") for i in range(300)])
        wait_until(lambda: store.stats()["penciller"]["ledger_sqn"] > 0, timeout=30)
        checkpoint = store.checkpoint()
        snap = store.snapshot(timeout_s=60)
        for r in range(4):
            last = store.put_many([lr.Put("b", f"k{i:04d}", b"round %d" % r)
                                   for i in range(300)])[-1]
        orphan = sst_name()  # what a writer that crashed mid-merge leaves behind
        objects.put(orphan, b"never published")
        settled(store, last)
        clock.advance(2.1)
        # A store is running: min_age must exceed the time from an upload to its commit.
        plan = lr.gc(url, min_age=2, options=options, clock=clock)
        assert orphan in plan.files and orphan not in stored(url, options)
        keys = [("b", f"k{i:04d}") for i in range(300)]
        assert lr.reader(url, checkpoint.id, options=options).get_many(keys) == [b"first"] * 300
        assert snap.get_many(keys) == [b"first"] * 300
        assert store.get_many(keys) == [b"round 3"] * 300
        # Nothing needs the old versions any more: a later pass leaves only the newest files.
        store.delete_checkpoint(checkpoint.id)
        snap.release()  # the store's lease no longer names what they read

        def only_current():
            settled(store, last)
            clock.advance(2.1)  # past min_age for whatever merges wrote meanwhile
            lr.gc(url, min_age=2, options=options, clock=clock)
            # Old versions go once their successors are RECREATE_GUARD_S old.
            return stored(url, options) <= current_files(url, options) | {
                m.path for m in objects.list("journal/")} and len(  # the tail stays
                    objects.list("manifest/")) < 10

        # Checked in one pass: a merge still running may upload files the next listing sees
        # before its manifest names them.
        wait_until(only_current, timeout=60, interval=1.0)
        assert store.get_many(keys) == [b"round 3"] * 300
    finally:
        store.close()


@pytest.mark.ray
def test_destroy_soft_and_hard(ray_cluster, s3_backend):
    url, options = s3_backend
    store = lr.open(url, options)
    store.put("b", "k", b"v")
    checkpoint = store.checkpoint()
    with pytest.raises(lr.InvalidArgumentError):
        lr.destroy(url, soft=False, options=options)  # a live checkpoint
    assert lr.destroy(url, options=options) == 0  # soft: marked, the writer fenced
    with pytest.raises(lr.FencedError):  # its next journal write meets the fence
        store.put("b", "k", b"after the destroy")
    store.close()
    with pytest.raises(lr.InvalidArgumentError):
        lr.open(url, options)
    objects = ObjectStore.from_url(url, options)
    assert lr.gc(url, min_age=0, options=options).paths == []  # the checkpoint keeps it all
    lr.admin(url, options).delete_checkpoint(checkpoint.id)
    assert lr.gc(url, min_age=0, options=options).paths
    assert everything(objects) == set()
    # Hard: everything now.
    other = url.rstrip("/") + "-hard"
    store = lr.open(other, options)
    store.put("b", "k", b"v")
    store.close()
    assert lr.destroy(other, soft=False, options=options) > 0
    assert everything(ObjectStore.from_url(other, options)) == set()


def test_a_failed_delete_is_left_for_the_next_pass(tmp_path):
    import asyncio

    from leveled_ray.manifest import ManifestStore
    from leveled_ray.testing.faults import Fault, FaultInjectingStore

    url = f"file://{tmp_path}/db"
    objects = ObjectStore.from_url(url)
    asyncio.run(ManifestStore(objects).create_initial(Manifest.new()))
    orphans = sorted(sst_name() for _ in range(3))
    for name in orphans:
        objects.put(name, b"never published")
    options = lr.Options(object_store=dict(max_retries=0))
    faulty = FaultInjectingStore.wrap(url, Fault("delete", orphans[1]), options=options)
    plan = asyncio.run(gcm.collect(faulty, options, min_age=0))  # no error: nothing in doubt
    assert plan.failed == [orphans[1]] and plan.deleted == [orphans[0], orphans[2]]
    assert stored(url, options) == {orphans[1]}
    assert asyncio.run(gcm.collect(objects, options, min_age=0)).deleted == [orphans[1]]
    assert stored(url, options) == set()


def test_files_a_prepared_part_names_are_kept_and_a_damaged_part_stops_the_pass(tmp_path):
    """A bulk write across shards prepares a part naming its files before it is decided: GC
    keeps them however old, deletes them once the part is gone, and deletes nothing while a
    part cannot be read."""
    import asyncio

    from leveled_ray.manifest import ManifestStore
    from leveled_ray.manifest.txn_records import Part, encode_part, part_name

    url = f"file://{tmp_path}/db"
    objects = ObjectStore.from_url(url)
    asyncio.run(ManifestStore(objects).create_initial(Manifest.new()))
    held, orphan = sst_name(), sst_name()
    for name in (held, orphan):
        objects.put(name, b"written by a bulk write")
    objects.put(part_name("t1"), encode_part(Part("file:///root", files=((), (sst(held),)))))
    plan = asyncio.run(gcm.collect(objects, lr.Options(), min_age=0))
    assert plan.deleted == [orphan] and plan.kept["a prepared batch's"] == 1
    objects.put(part_name("t2"), b"damaged")
    with pytest.raises(lr.CorruptObjectError):
        asyncio.run(gcm.collect(objects, lr.Options(), min_age=0))
    objects.delete(part_name("t2"))
    objects.delete(part_name("t1"))  # settled: dropped
    assert asyncio.run(gcm.collect(objects, lr.Options(), min_age=0)).deleted == [held]
