"""The deletion rule, snapshot leases and GC's choice of versions, as pure functions (no Ray,
no object store)."""

import pytest

import leveled_ray as lr
from leveled_ray.admin import gc as gcm
from leveled_ray.files.backends import ObjectMeta
from leveled_ray.files.names import manifest_name, snapshot_lease_name
from leveled_ray.files.sst import SstInfo
from leveled_ray.manifest import Checkpoint, Manifest
from leveled_ray.manifest import snapshot_leases as sl
from leveled_ray.manifest.deletion import Proof, deletable, pinned_below

NOW = 1_000_000.0
DAY = 86_400.0
WINDOW = 3600.0


def test_doubt_deletes_nothing_and_needed_objects_stay():
    assert deletable(["a", "b", "c"], Proof().need(["b"])) == ["a", "c"]
    assert deletable(["a", "b"], Proof().doubt("a read failed")) == []
    assert deletable(["a"], Proof().need(["x"]).doubt("?")) == []
    assert Proof().certain and not Proof().doubt("?").certain


def test_a_file_is_pinned_by_any_older_version():
    assert pinned_below(5, [5, 7]) is False
    assert pinned_below(5, [4]) is True
    assert pinned_below(5, []) is False


def lease(**changes):
    base = dict(epoch=2, written_at=NOW - 1, renew_s=10.0, max_timeout_s=100.0, floors=(7, 7))
    if "floor" in changes:
        changes["floors"] = (changes["floor"],) * 2
        del changes["floor"]
    return sl.SnapshotLease(**{**base, **changes})


def test_lease_round_trip_and_damage():
    one = lease(closed=True, snapshots=((3, 2, 9, NOW + 5),), legacy_below=2, legacy_until=NOW + 9)
    assert sl.decode(sl.encode(one), "leases/x") == one
    for bad in (b"", b"{}", b"[1]", sl.encode(one).replace(b'"format": 1', b'"format": 9')):
        with pytest.raises(lr.CorruptObjectError) as err:
            sl.decode(bad, "leases/x")
        assert err.value.path == "leases/x"


def pinned(sst=(), journal=()):
    return {"sst": frozenset(sst), "journal": frozenset(journal)}


def test_what_a_lease_pins():
    assert sl.pins(lease(), NOW) == sl.Pins((7, 7), pinned())  # a running writer: its floors on
    older = lease(snapshots=((2, 3, 9, NOW + 5), (4, 4, 9, NOW - 5)))  # and its live snapshots
    assert sl.pins(older, NOW) == sl.Pins((7, 7), pinned({2}, {3}), frozenset({(3, 9)}))
    stale = lease(written_at=NOW - 50)  # not renewed: its snapshots may still be read ...
    assert not stale.fresh(NOW) and sl.pins(stale, NOW).floors == (7, 7)
    gone = lease(written_at=NOW - 131)  # ... until every one it could have taken timed out
    assert sl.pins(gone, NOW).empty and not sl.needed(gone, NOW)
    closed = lease(closed=True, snapshots=((3, 3, 5, NOW + 5), (4, 4, 5, NOW - 5)))
    assert sl.pins(closed, NOW) == sl.Pins(None, pinned({3}, {3}), frozenset({(3, 5)}))
    assert sl.needed(lease(closed=True, legacy_below=3, legacy_until=NOW + 1), NOW)
    assert sl.snapshot_versions([(1, 2, 3, 5.0), (1, 2, 3, 9.0), (0, 2, 3, 1.0)]) == (
        (0, 2, 3, 1.0), (1, 2, 3, 9.0))


def manifests(times):
    """A listing of manifest versions 0..n-1 created at ``NOW - age``."""
    return [ObjectMeta(manifest_name(i), 10, NOW - age) for i, age in enumerate(times)]


ALL = frozenset({"sst", "journal"})


def whole(*mids):
    return {m: ALL for m in mids}


def test_leases_replace_the_window():
    listing = manifests([DAY, 600, 500, 400, 300])  # each was current within the window
    latest = (4, Manifest.new().with_changes(writer_epoch=2))
    # No lease for the current writer: every version current within the window is kept.
    assert gcm.needed_versions(listing, latest, NOW, 0, WINDOW) == whole(0, 1, 2, 3, 4)
    # Its lease says what snapshots read: versions from its floors on, per kind.
    leases = {2: lease(floors=(3, 2))}
    assert gcm.needed_versions(listing, latest, NOW, 0, WINDOW, leases) == {
        2: frozenset({"journal"}), 3: ALL, 4: ALL}
    # A closed lease keeps only the versions its unexpired snapshots read.
    leases = {1: lease(epoch=1, closed=True, snapshots=((1, 1, 0, NOW + 9), (2, 2, 0, NOW - 9))),
              2: lease(floor=4)}
    assert gcm.needed_versions(listing, latest, NOW, 0, WINDOW, leases) == whole(1, 4)
    # The legacy window: below legacy_below, versions current within the window stay.
    leases = {2: lease(floor=4, legacy_below=2, legacy_until=NOW + 1)}
    assert gcm.needed_versions(listing, latest, NOW, 0, WINDOW, leases) == whole(0, 1, 4)
    leases = {2: lease(floor=4, legacy_below=2, legacy_until=NOW - 1)}  # over
    assert gcm.needed_versions(listing, latest, NOW, 0, WINDOW, leases) == whole(4)
    # A live checkpoint's version stays whatever the leases say.
    held = (4, latest[1].with_changes(checkpoints=(Checkpoint("c", 0, None, 0.0),)))
    assert gcm.needed_versions(listing, held, NOW, 0, WINDOW, {2: lease(floor=4)}) == whole(0, 4)


def test_a_version_kept_for_one_kind_keeps_only_its_files_of_that_kind():
    from leveled_ray.files.journal import JournalInfo
    from leveled_ray.files.names import journal_slot_name

    old = Manifest.new().with_changes(
        levels=((sst("ledger/old.sst"),),),
        journal=(JournalInfo(journal_slot_name(0), 0, 1, 0, 10, 1, 1, 1),))
    new = old.with_changes(levels=((sst("ledger/new.sst"),),), journal=())
    known = gcm.Known((1, new), {}, {0: old, 1: new}, {0: frozenset({"journal"}), 1: ALL})
    assert known.referenced() == {"ledger/new.sst", journal_slot_name(0)}


def sst(name):
    return SstInfo(name, 10, 1, 0, b"a", b"z", 1, 1)


def test_a_pass_with_a_doubt_deletes_nothing_and_leases_go_when_unneeded():
    m = Manifest.new().with_changes(levels=((sst("ledger/A.sst"),),), writer_epoch=3)
    old_lease = lease(epoch=1, closed=True)  # pins nothing
    needed_lease = lease(epoch=2, closed=True, snapshots=((0, 0, 0, NOW + 9),))
    listing = [ObjectMeta(p, 10, NOW - DAY) for p in (
        manifest_name(0), manifest_name(1), "ledger/A.sst", "ledger/orphan.sst",
        snapshot_lease_name(1), snapshot_lease_name(2), snapshot_lease_name(3))]
    known = gcm.Known((1, m), {1: old_lease, 2: needed_lease, 3: lease(epoch=3, closed=True)},
                      {1: m})
    plan = gcm.plan(listing, known, NOW, 0, grace=0)
    assert plan.files == ["ledger/orphan.sst"] and plan.manifests == [manifest_name(0)]
    assert plan.leases == [snapshot_lease_name(1)]  # the newest lease always stays
    doubtful = gcm.plan(listing, known, NOW, 0, grace=0, doubts=["v0: 503 after retries"])
    assert doubtful.paths == [] and doubtful.doubts == ("v0: 503 after retries",)


def test_a_stopped_pass_raises_the_type_its_cause_promises():
    missing = lr.CorruptObjectError(manifest_name(3), 0, "a live checkpoint pins it")
    failed = lr.ObjectStoreError("503", definite=True, path=manifest_name(4))
    err = gcm.stopped([failed, missing])
    assert isinstance(err, lr.CorruptObjectError) and err.path == manifest_name(3)
    err = gcm.stopped([failed])
    assert isinstance(err, lr.ObjectStoreError) and err.definite and "deleted nothing" in str(err)


def test_a_snapshot_keeps_the_journal_files_written_before_it_but_recorded_later():
    from leveled_ray.files.names import journal_slot_name

    taken_at = Manifest.new().with_changes(journal_next_slot=1, writer_epoch=1)  # slot 0 only
    now_m = taken_at.with_changes(journal_next_slot=6)  # slots 1-5 recorded, then compacted away
    snap = lease(epoch=1, floor=2, snapshots=((0, 0, 3, NOW + 9),))  # it read slots 0-2
    listing = [ObjectMeta(journal_slot_name(i), 10, NOW - DAY) for i in range(6)]
    known = gcm.Known((2, now_m), {1: snap}, {0: taken_at, 2: now_m},
                      {0: frozenset({"journal"}), 2: ALL})
    plan = gcm.plan(listing, known, NOW, 0, grace=0)
    assert plan.files == [journal_slot_name(i) for i in (0, 3, 4, 5)]
    assert plan.kept["a snapshot's journal tail"] == 2
