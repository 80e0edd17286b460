"""Splitting a shard by reference: the children start from its files, copy nothing, and every
read, fold, index query and position agrees with a model (a dict), before and after their
merges and journal compaction drop the other child's keys; a split stopped after any step
leaves the old layout or the new one."""

import os
import random
import shutil

import pytest
from support.model import check_model, write_rounds
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.cluster.split import STEPS, split_shard
from leveled_ray.codec.keys import object_key
from leveled_ray.codec.owned import SETTING as OWNS
from leveled_ray.codec.owned import Owns
from leveled_ray.files.clerk import ClerkHost
from leveled_ray.files.journal import NO_SLOT
from leveled_ray.files.routed import is_foreign
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest.split_points import split_points
from leveled_ray.manifest.store import ManifestStore

pytestmark = pytest.mark.ray

OPTIONS = lr.Options(**SMALL)


def stored_bytes(root) -> int:
    """Bytes of the objects under a directory (a file:// store)."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(root)
               for n in names)


def test_a_split_copies_nothing_and_every_read_agrees_with_the_model(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    rng, model = random.Random(7), {}
    with lr.open(url, OPTIONS, shards=2) as store:
        history = write_rounds(store, model, 12, rng)
        before = store.snapshot().sqn  # a position taken before the split
        check_model(store, model)
    size = stored_bytes(tmp_path / "db")
    admin = lr.admin(url, OPTIONS)
    for bad in (2, -1, "0"):
        with pytest.raises(lr.InvalidArgumentError, match="no shard"):
            admin.split_shard(bad)
    assert stored_bytes(tmp_path / "db") == size  # refused before anything was written
    split = admin.split_shard(0)
    assert split.labels == ("0.0", "0.1", "1") and split.version == 2
    made = {os.path.relpath(os.path.join(d, n), tmp_path / "db" / p).split(os.sep)[0]
            for p in split.prefixes[:2]
            for d, _, names in os.walk(tmp_path / "db" / p) for n in names}
    assert made == {"manifest"}  # the children's manifests: the files are the parent's
    copied = sum(stored_bytes(tmp_path / "db" / p) for p in split.prefixes[:2])
    children = [f"{url}/{p}" for p in split.prefixes[:2]]
    assert copied < 0.1 * size, (copied, size)  # (bench/elastic.py: a 1 GiB shard's ratio)
    # Where the children's shared history ends: at least every change before the split.
    points = [split_points(latest_manifest(c)) for c in children]
    assert points[0] == points[1] and list(points[0]) == ["0"] and points[0]["0"] >= before["0"]
    with lr.reader(url, options=OPTIONS) as at_rest:  # without Ray, through the new map
        check_model(at_rest, model)

    with lr.open(url, OPTIONS) as store:
        assert store.shards == 3 and store.shard_map.labels == split.labels
        check_model(store, model)
        # The children's history is the parent's: each change once, in one child.
        assert sorted((c.key, c.kind) for c in store.changes(0, values=False)) == sorted(
            history)
        with pytest.raises(lr.WrongShardError):  # a child refuses the other child's keys
            stray = next(f"k{i:04d}" for i in range(300)
                         if store.shard_of("b", f"k{i:04d}") == 1)
            store.shard(0).put("b", stray, b"wrong place")
        assert store.get("b", stray) == model.get(stray)
        written = write_rounds(store, model, 12, rng)  # merges and compaction in each child
        check_model(store, model)
        # A position from before the split reads on in both children: each change once.
        since = list(store.changes(before, values=False))
        assert sorted((c.key, c.kind) for c in since) == sorted(written)
        wait_until(lambda: compacted(store, children), timeout=60, interval=0.2)
        check_model(store, model)
    for child in children:  # the files a child wrote hold its own keys only
        ssts, journal = run_sync(child_files(child))
        assert ssts and journal, "no merge or compaction rewrote the inherited files"
        owns = Owns.decode(latest_manifest(child).setting(OWNS))
        assert all(owns.mask(keys).all() for keys in ssts + journal)
    # The children share nothing now: GC detaches them, and deletes the retired shard whole.
    for _ in range(2):
        lr.admin(url, OPTIONS).gc(min_age=0)
    assert all(latest_manifest(c).parent is None for c in children)
    assert [n for _, _, names in os.walk(tmp_path / "db" / "shard-000") for n in names] == []
    with lr.reader(url, options=OPTIONS) as at_rest:  # from what the children wrote
        check_model(at_rest, model)


def compacted(store, children: list[str]) -> bool:
    """Compact the Journal once more; whether the children share no file with their parent
    (each compaction rewrites a run of inherited journal files; merges, inherited SSTs)."""
    store.compact_journal(wait=True)
    return not any(is_foreign(f.name) for c in children
                   for f in (*latest_manifest(c).sst_files(), *latest_manifest(c).journal))


def latest_manifest(url: str):
    return run_sync(ManifestStore(ObjectStore.from_url(url)).latest()).manifest


async def child_files(url: str) -> tuple[list[list[bytes]], list[list[bytes]]]:
    """The keys of each SST, and of each compacted journal file, a store wrote itself (not
    one it inherited)."""
    host = ClerkHost(ObjectStore.from_url(url), 1 << 20)
    manifest = latest_manifest(url)
    ssts = [(await host.sst(f).read_table()).column("key").to_pylist()
            for f in manifest.sst_files() if not is_foreign(f.name)]
    journal = [[r.lkey for r in await host.journal(j).read_records()] for j in manifest.journal
               if not is_foreign(j.name) and j.entries and j.slot == NO_SLOT]
    return ssts, journal


@pytest.fixture(scope="module")
def two_shards(ray_cluster, tmp_path_factory):
    """A closed 2-shard store and its model, copied by each test that splits it."""
    root = tmp_path_factory.mktemp("split-template") / "db"
    model: dict = {}
    with lr.open(f"file://{root}", OPTIONS, shards=2) as store:
        write_rounds(store, model, 6, random.Random(3))
    return root, model


@pytest.mark.parametrize("stop_after", STEPS)
def test_a_split_stopped_after_any_step_leaves_one_layout(two_shards, tmp_path, stop_after):
    template, model = two_shards
    shutil.copytree(template, tmp_path / "db")
    url, model = f"file://{tmp_path}/db", dict(model)

    class Stop(Exception):
        pass

    def stop(step):
        if step == stop_after:
            raise Stop(step)

    with pytest.raises(Stop):
        run_sync(split_shard(url, 1, OPTIONS, after_step=stop))
    retired = STEPS.index(stop_after) >= STEPS.index("retire")
    with lr.reader(url, options=OPTIONS) as at_rest:  # the old layout or the new: no mix
        assert at_rest.shard_map.count == (3 if retired else 2)
        check_model(at_rest, model)
    if stop_after in ("children", "retire"):  # written on: an open after the stop
        with lr.open(url, OPTIONS) as store:
            write_rounds(store, model, 2, random.Random(4))
            check_model(store, model)
    if not retired:  # and split later, from what the shard holds then
        split = lr.admin(url, OPTIONS).split_shard(1)
        assert split.count == 3
        with lr.reader(url, options=OPTIONS) as at_rest:
            check_model(at_rest, model)
        # Only the pins of the children it published hold the retired shard's files.
        pins = {c.name for c in latest_manifest(f"{url}/shard-001").checkpoints}
        assert pins == {f"clone:{url}/{p}" for p in split.prefixes[1:]}


def test_a_split_child_neither_reads_nor_compares_its_siblings_keys(two_shards, tmp_path):
    """The children share the shard's files: each refuses a read of the other's keys
    (``WrongShardError``, as it refuses a write), and a compare of one leaves the other's
    keys out (its tree and the keys of its dirty segments), at rest and running."""
    template, model = two_shards
    shutil.copytree(template, tmp_path / "db")
    shutil.copytree(template, tmp_path / "before")  # the store as it was before the split
    url = f"file://{tmp_path}/db"
    split = lr.admin(url, OPTIONS).split_shard(0)
    children = [f"{url}/{p}" for p in split.prefixes[:2]]
    own = [sorted(k for k in model if split.shard_of(object_key("b", k)) == c) for c in (0, 1)]
    assert own[0] and own[1]
    # Each child holds its own keys only: compared with each other, no key is in both.
    expected = sorted([(k, "missing_in_b") for k in own[0]] + [(k, "missing_in_a") for k in own[1]])
    assert differences(lr.compare(*children, options=OPTIONS)) == expected
    assert lr.compare(url, f"file://{tmp_path}/before", options=OPTIONS).equal
    with lr.open(url, OPTIONS) as store:
        child, sibling = store.shard(0), store.shard(1)
        for read in (lambda k: child.get("b", k), lambda k: child.head("b", k),
                     lambda k: child.get_many([("b", own[0][0]), ("b", k)]),
                     lambda k: child.head_many([("b", k)])):
            with pytest.raises(lr.WrongShardError):
                read(own[1][0])
        with pytest.raises(lr.WrongShardError):
            sibling.get("b", own[0][0])
        assert child.get("b", own[0][0]) == model[own[0][0]]
        assert store.get("b", own[1][0]) == model[own[1][0]]  # through the shard map
        assert differences(lr.compare(child, sibling)) == expected


def differences(comparison) -> list[tuple[str, str]]:
    return sorted((d.key, d.kind) for d in comparison.differences)


def test_a_shard_whose_bookie_died_splits_and_each_child_replays_its_own_keys(ray_cluster,
                                                                              tmp_path):
    """The killed shard's newest changes are only in its Journal: each child replays them
    from the parent's journal files, leaving out the other child's."""
    import ray

    url = f"file://{tmp_path}/db"
    options = OPTIONS.replace(ledger=dict(l0_max_keys=100_000), gc=dict(lease_renew_s=0.2),
                              max_restarts=0)
    rng, model = random.Random(5), {}
    store = lr.open(url, options, shards=2)
    write_rounds(store, model, 6, rng)
    unpersisted = store.stats()["shards"][0]["backlog"]["unpersisted"]
    assert unpersisted > 0
    for actor in store.actors():
        ray.kill(actor, no_restart=True)
    admin = lr.admin(url, options)

    def split() -> bool:  # once the dead writers' snapshot leases are stale
        try:
            admin.split_shard(0)
            return True
        except lr.InvalidArgumentError as exc:
            assert "being written" in str(exc)
            return False
    wait_until(split, timeout=30, interval=0.2)
    with lr.open(url, options) as reopened:
        assert reopened.shards == 3
        replayed = [s["replayed"] for s in reopened.stats()["shards"]]
        assert 0 < replayed[0] + replayed[1] <= unpersisted  # each its own part
        check_model(reopened, model)
