"""The manifest CAS loop and transitions (pure functions, no Ray), and a race against moto."""

import asyncio
import threading

import pytest
from support.s3 import S3_BUCKET, s3_options

import leveled_ray as lr
from leveled_ray.files.outcomes import Created
from leveled_ray.files.sst import SstInfo
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest import Checkpoint, Manifest, ManifestStore, cas_update
from leveled_ray.manifest import checkpoints as cp
from leveled_ray.manifest import transitions as tr
from leveled_ray.manifest.model import HistoryLease


class FakeManifests:
    """An in-memory id -> manifest map with put-if-absent, and a hook to inject rival writes."""

    def __init__(self, manifest):
        self.objects = {0: manifest}
        self.before_create = None
        self.creates = 0

    async def read_latest(self, known):
        top = max(self.objects)
        return top, self.objects[top]

    async def try_create(self, mid, manifest, previous=None):
        self.creates += 1
        if self.before_create:
            hook, self.before_create = self.before_create, None
            hook()
        if mid in self.objects:
            return Created.THEIRS
        self.objects[mid] = manifest
        return Created.MINE


def add_marker(name):
    return lambda m: m.with_changes(
        checkpoints=m.checkpoints + (Checkpoint(name, 0, None, 0.0),))


def test_cas_update_first_guess_costs_one_create():
    fake = FakeManifests(Manifest.new())
    mid, m = asyncio.run(cas_update((0, fake.objects[0]), fake.read_latest, fake.try_create,
                                    add_marker("a")))
    assert (mid, fake.creates) == (1, 1)
    assert [c.id for c in m.checkpoints] == ["a"]


def test_cas_update_reapplies_after_a_conflict():
    fake = FakeManifests(Manifest.new())
    rival = add_marker("rival")(fake.objects[0])
    fake.before_create = lambda: fake.objects.__setitem__(1, rival)
    mid, m = asyncio.run(cas_update((0, fake.objects[0]), fake.read_latest, fake.try_create,
                                    add_marker("mine")))
    assert mid == 2
    assert [c.id for c in m.checkpoints] == ["rival", "mine"]  # the rival's change is kept


def test_cas_update_no_change_writes_nothing():
    fake = FakeManifests(Manifest.new())
    current = (0, fake.objects[0])
    assert asyncio.run(cas_update(current, fake.read_latest, fake.try_create,
                                  lambda m: m)) == current
    assert fake.creates == 0


def test_cas_update_transition_errors_write_nothing():
    fake = FakeManifests(Manifest.new().with_changes(writer_epoch=2))
    with pytest.raises(lr.FencedError):
        asyncio.run(cas_update(None, fake.read_latest, fake.try_create,
                               lambda m: tr.persist_ledger_sqn(m, 1, 10)))
    assert fake.creates == 0 and list(fake.objects) == [0]


def test_cas_update_believes_a_refusal_only_on_the_newest_manifest():
    """A writer's first guess is its own last version; another process has changed the
    history leases since. A refusal the stale guess gives is checked on the newest version:
    the change applies where the lease is gone, and is still refused where one holds."""
    held = Manifest.new().with_changes(writer_epoch=1, leases=(HistoryLease("feed", 0, 1e12),))

    def trim(m):
        return tr.replace_journal(m, 1, (), (), history_sqn=10, now=1.0)

    with pytest.raises(lr.HistoryUnavailableError):  # on the stale guess alone
        trim(held)
    for newest, refused in ((held.with_changes(leases=()), False),
                            (held.with_changes(leases=(HistoryLease("other", 5, 1e12),)), True)):
        fake = FakeManifests(held)
        fake.objects[1] = newest
        if refused:
            with pytest.raises(lr.HistoryUnavailableError):
                asyncio.run(cas_update((0, held), fake.read_latest, fake.try_create, trim))
            assert list(fake.objects) == [0, 1]
        else:
            mid, m = asyncio.run(cas_update((0, held), fake.read_latest, fake.try_create, trim))
            assert (mid, m.history_sqn, m.leases) == (2, 10, ())


def test_cas_update_does_not_trust_a_recreated_old_id():
    """GC deleted old versions 1..4 while a stale caller still held version 0: its create of
    id 1 succeeds, but version 5 is newer. The change is applied again on top of 5."""
    fake = FakeManifests(Manifest.new())
    fake.objects[5] = add_marker("newest")(fake.objects[0])
    stale = (0, fake.objects[0])

    async def superseded(mid):  # version 5 predates the re-created 1
        return mid == 1

    mid, m = asyncio.run(cas_update(stale, fake.read_latest, fake.try_create, add_marker("mine"),
                                    superseded=superseded))
    assert mid == 6 and [c.id for c in m.checkpoints] == ["newest", "mine"]


def test_checkpoints_pin_versions_and_expire():
    m = Manifest.new()
    a = cp.new_checkpoint(None, "forever", now=100.0)
    m = cp.add_checkpoint(7, m, a, None, now=100.0)
    assert cp.find(m, a.id, 100.0).manifest_id == 7  # the version it was applied to
    b = cp.new_checkpoint(10.0, None, now=100.0)
    m = cp.add_checkpoint(9, m, b, a.id, now=100.0)  # from a source: the source's version
    assert cp.find(m, b.id, 100.0).manifest_id == 7
    assert cp.blocks_delete(m, 8, now=105.0) and not cp.blocks_delete(m, 7, now=105.0)
    m = cp.refresh_checkpoint(m, b.id, 100.0, now=105.0)
    assert cp.find(m, b.id, 150.0).expires_at == 205.0
    assert [c.id for c in cp.live(m, 300.0)] == [a.id]  # b expired
    m = cp.delete_checkpoint(m, a.id, now=300.0)
    assert not cp.blocks_delete(m, 10**6, now=300.0)
    with pytest.raises(lr.CheckpointNotFoundError):
        cp.delete_checkpoint(m, a.id, now=300.0)
    with pytest.raises(lr.CheckpointNotFoundError):
        cp.refresh_checkpoint(m, b.id, 5.0, now=300.0)  # expired is gone
    with pytest.raises(lr.InvalidArgumentError):
        cp.new_checkpoint(-1, None, now=0.0)
    with pytest.raises(lr.InvalidArgumentError):
        cp.new_checkpoint(None, "", now=0.0)
    for bad_id in ("", 7, b"id"):
        with pytest.raises(lr.InvalidArgumentError):
            cp.new_checkpoint(None, None, now=0.0, checkpoint_id=bad_id)
    again = cp.new_checkpoint(None, "forever", now=100.0, checkpoint_id=a.id)  # a retry's
    assert cp.add_checkpoint(8, m.with_changes(checkpoints=(a,)), again, None, now=100.0) \
        .checkpoints == (a,)
    with pytest.raises(lr.InvalidArgumentError):
        cp.add_checkpoint(1, m.with_changes(destroyed_at=1.0), a, None, now=0.0)


def test_transitions_fence_old_writers():
    m = tr.bump_epoch(Manifest.new())
    assert m.writer_epoch == 1
    sst = SstInfo("ledger/a.sst", 10, 1, 0, b"a", b"b", 1, 5)
    m2 = tr.add_l0(m, 1, sst, 5)
    assert m2.levels[0] == (sst,) and m2.ledger_sqn == 5
    m3 = tr.bump_epoch(m2)
    with pytest.raises(lr.FencedError) as err:
        tr.add_l0(m3, 1, sst, 6)
    assert (err.value.epoch, err.value.current_epoch) == (1, 2)
    with pytest.raises(lr.FencedError):
        tr.catalog_journal(m3, 1, (), 3)


def test_a_restarted_writer_reclaims_the_store_only_if_no_one_opened_it_meanwhile():
    """Failover (actors/failover.py): the restarted writer takes the next epoch after its
    lost one, and stands down, fenced, if another writer has opened the store since."""
    lost = tr.bump_epoch(tr.bump_epoch(Manifest.new()))  # the lost writer held epoch 2
    assert tr.reclaim_epoch(lost, lost_epoch=2).writer_epoch == 3
    opened_meanwhile = tr.bump_epoch(lost)
    with pytest.raises(lr.FencedError) as err:
        tr.reclaim_epoch(opened_meanwhile, lost_epoch=2)
    assert (err.value.epoch, err.value.current_epoch) == (2, 3)
    with pytest.raises(lr.FencedError):  # a claim of unknown outcome that landed: stand down
        tr.reclaim_epoch(tr.reclaim_epoch(lost, lost_epoch=2), lost_epoch=2)
    with pytest.raises(lr.InvalidArgumentError, match="destroyed"):
        tr.reclaim_epoch(lost.with_changes(destroyed_at=1.0), lost_epoch=2)


def test_a_split_retires_its_shard_only_if_no_one_opened_it_since_the_claim():
    claimed = tr.bump_epoch(Manifest.new().with_changes(writer_epoch=4))  # the splitter: 5
    retired = tr.retire_for_split(claimed, 5, 100.0)
    assert (retired.split_epoch, retired.writer_epoch, retired.destroyed_at) == (5, 6, 100.0)
    assert tr.retire_for_split(retired, 5, 200.0) is retired  # an earlier attempt landed
    with pytest.raises(lr.WrongShardError):  # nobody opens or writes it again
        tr.bump_epoch(retired)
    opened = tr.bump_epoch(claimed)  # a writer opened it after the claim: the split is off
    with pytest.raises(lr.FencedError):
        tr.retire_for_split(opened, 5, 100.0)


def test_a_retired_shard_takes_copies_of_its_checkpoints_only():
    """A clone of a checkpoint taken before a split pins it again in the retired shard; a new
    checkpoint of the retired shard's own data is refused."""
    held = cp.new_checkpoint(None, "before the split", now=100.0)
    m = cp.add_checkpoint(7, Manifest.new(), held, None, now=100.0)
    retired = tr.retire_for_split(tr.bump_epoch(m), 1, 110.0)
    pin = cp.new_checkpoint(None, "clone:file:///c", now=120.0)
    pinned = cp.add_checkpoint(9, retired, pin, held.id, now=120.0)
    assert cp.find(pinned, pin.id, 120.0).manifest_id == 7  # held's version, nothing newer
    with pytest.raises(lr.WrongShardError):
        cp.add_checkpoint(9, retired, cp.new_checkpoint(None, None, now=120.0), None, now=120.0)


def test_destroyed_or_uninitialized_store_cannot_be_claimed():
    with pytest.raises(lr.InvalidArgumentError, match="destroyed"):
        tr.bump_epoch(Manifest.new().with_changes(destroyed_at=1.0))
    with pytest.raises(lr.InvalidArgumentError, match="clone"):
        tr.bump_epoch(Manifest.new().with_changes(initialized=False))


@pytest.mark.parametrize("url_kind", ["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def test_eight_threads_race_for_the_next_id(url_kind, tmp_path, request):
    if url_kind == "s3":
        endpoint = request.getfixturevalue("moto_endpoint")
        store = ObjectStore.from_url(f"s3://{S3_BUCKET}/race-{tmp_path.name}",
                                     s3_options(endpoint))
    elif url_kind == "file":
        store = ObjectStore.from_url(f"file://{tmp_path}/race")
    else:
        store = ObjectStore.from_url(f"memory://race-{tmp_path.name}")
    manifests = ManifestStore(store)
    asyncio.run(manifests.create_initial(Manifest.new()))
    threads, per_thread = 8, 6
    won: dict[int, list] = {}
    lock = threading.Lock()

    def worker(t):
        async def run():
            for i in range(per_thread):
                mid, _ = await manifests.update(add_marker(f"{t}-{i}"))
                with lock:
                    won.setdefault(mid, []).append(f"{t}-{i}")
        asyncio.run(run())

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    total = threads * per_thread
    # Exactly one writer won each id, the ids are contiguous, and no update was lost.
    assert sorted(won) == list(range(1, total + 1))
    assert all(len(v) == 1 for v in won.values())
    ids = asyncio.run(manifests.all_ids())
    assert ids == list(range(total + 1))
    final = asyncio.run(manifests.read(total))
    assert sorted(c.id for c in final.checkpoints) == sorted(v[0] for v in won.values())


def test_a_stale_writer_cannot_revive_a_collected_version(tmp_path):
    store = ObjectStore.from_url(f"file://{tmp_path}/db")
    manifests = ManifestStore(store)
    stale = asyncio.run(manifests.create_initial(Manifest.new()))
    for i in range(5):
        asyncio.run(manifests.update(add_marker(f"v{i + 1}")))
    for old in range(1, 5):  # what GC does with old versions
        store.delete(f"manifest/{old:020d}")
    mid, m = asyncio.run(manifests.update(add_marker("stale"), stale))
    assert mid == 6 and m.checkpoints[-1].id == "stale" and len(m.checkpoints) == 6


def test_a_tree_saved_under_an_earlier_key_rule_is_not_used():
    """A kept tree records how its keys were hashed; one saved before (no such field: ``str``
    names hashed as their bytes) is not the Ledger's tree, so the store folds it again."""
    import dataclasses

    from leveled_ray.codec.tictac import TREE_KEYS
    from leveled_ray.manifest.model import KeptTree, Manifest

    m = Manifest.new()
    saved = KeptTree("ledger/t.tree", "large", m.store_id, m.ledger_sqn, False, TREE_KEYS)
    assert dataclasses.replace(m, tree=saved).kept_tree() == saved
    old = KeptTree(*list(dataclasses.astuple(saved))[:5])  # as an older manifest decodes
    assert old.keys == 0 and dataclasses.replace(m, tree=old).kept_tree() is None


def test_a_manifest_decoded_again_is_the_one_kept_and_damage_is_still_found():
    """Decoded manifests are kept by their bytes: the same bytes give the same manifest, and
    other bytes (damaged, or under another id) are decoded and checked as ever."""
    from leveled_ray.manifest.model import decode, encode

    data = encode(Manifest(store_id="s", writer_epoch=3), 7)
    first = decode(data, "manifest/7", 7)
    assert decode(bytes(data), "manifest/7", 7) is first and first.writer_epoch == 3
    with pytest.raises(lr.CorruptObjectError):
        decode(data, "manifest/8", 8)  # its body says 7
    damaged = bytearray(data)
    damaged[-1] ^= 1
    with pytest.raises(lr.CorruptObjectError):
        decode(bytes(damaged), "manifest/7", 7)
