"""A bulk write of a sharded store is all or nothing across its shards, also when its driver
is killed (-9) at each phase of the commit: with no process holding the store open (settled
by the next bulk write or by opening the store) and through the running store (settled by its
Bookies, and by a cut that meets it half-applied)."""

import threading
import time
import uuid

import pyarrow as pa
import pytest
from support.waits import run_until_ready_then_kill, wait_until

import leveled_ray as lr
from leveled_ray.bulk import sharded as bulk
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest.shard_map import ShardMap, create_shard_map
from leveled_ray.manifest.store import ManifestStore
from leveled_ray.manifest.txn_records import COMMIT, decide, decode_part

N = 400
KEYS = [("b", f"k{i:04d}") for i in range(N)]

#: A driver that runs a bulk write's commit up to a phase, says so, and waits to be killed:
#: ``prepared`` (every shard holds its part, undecided), ``decided`` (the record says
#: commit, nothing installed) or ``partly`` (shard 0 installed its part).
DRIVER = """
import asyncio, sys, time
import pyarrow as pa
from leveled_ray.bulk import sharded as bulk
from leveled_ray.bulk.write import gather_files
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.txn_records import COMMIT, decide

url, phase, txn, name, address = sys.argv[1:6]
n = int(sys.argv[6])

async def run():
    plan = await bulk.begin_write_async(url, store_name=name or None,
                                        ray_address=address or None)
    rows = pa.record_batch({"bucket": ["b"] * n, "key": [f"k{i:04d}" for i in range(n)],
                            "value": [b"new"] * n})
    messages = [await bulk.write_partition_async(plan, p, [rows.slice(p * n // 2, n // 2)])
                for p in (0, 1)]
    files = {s: gather_files(parts) for s, parts in bulk.shard_files(plan, messages).items()}
    assert sorted(files) == [0, 1]
    await bulk.prepare(plan, txn, files)
    if phase != "prepared":
        await decide(ObjectStore.from_url(url), txn, COMMIT)
    if phase == "partly":
        await bulk.apply(plan, txn, [0])

asyncio.run(run())
print("READY", flush=True)
time.sleep(600)
"""


def kill_driver_at(url: str, phase: str, name: str = "", address: str = "",
                   txn: str = "") -> str:
    txn = txn or f"t{uuid.uuid4().hex}"
    run_until_ready_then_kill(DRIVER, url, phase, txn, name, address, str(N))
    return txn


def parts_left(url: str) -> int:
    return sum(len(ObjectStore.from_url(f"{url}/shard-{s:03d}").list("txn/")) for s in (0, 1))


def new_sharded(url: str) -> ShardMap:
    """A sharded store of two shards as ``lr.open(url, shards=2)`` lays it out, made without
    Ray (a bulk write creates each shard's first manifest)."""
    return run_sync(create_shard_map(ObjectStore.from_url(url), ShardMap.new(2)))


def values(url: str) -> list:
    with lr.reader(url) as r:
        return r.get_many(KEYS)


@pytest.mark.parametrize("phase,visible", [("prepared", False), ("decided", True),
                                           ("partly", True)])
def test_a_driver_killed_at_any_phase_leaves_all_or_nothing_offline(tmp_url, phase, visible):
    shard_map = new_sharded(tmp_url)
    kill_driver_at(tmp_url, phase)
    left = parts_left(tmp_url)
    assert left == (1 if phase == "partly" else 2)
    with pytest.raises(lr.InvalidArgumentError, match="not yet settled"):
        lr.reader(tmp_url)  # no consistent checkpoint while a batch is half settled
    assert run_sync(bulk.settle_offline(tmp_url, shard_map, lr.Options())) == left
    assert parts_left(tmp_url) == 0
    assert values(tmp_url) == [b"new" if visible else None] * N
    lr.gc(tmp_url, min_age=0)  # what an aborted write wrote is an orphan now; nothing else
    assert values(tmp_url) == [b"new" if visible else None] * N


@pytest.mark.ray
def test_a_committed_part_left_offline_is_installed_when_the_store_opens(ray_cluster, tmp_url):
    """Also once its files are older than the publish window (``gc.min_age_s / 2``): GC keeps
    what a prepared part names, so the part is installed however late its shard reopens."""
    new_sharded(tmp_url)
    window = 0.001  # the driver's own run takes longer: its files are older than that
    begun = time.time()
    kill_driver_at(tmp_url, "decided")
    assert time.time() - begun > window
    store = lr.open(tmp_url, lr.Options(gc={"min_age_s": 2 * window}))
    try:
        assert store.get_many(KEYS) == [b"new"] * N
        stats = store.stats()["shards"]
        assert [s["txn_recovered"] for s in stats] == [1, 1]
        assert [s["penciller"]["late_ingests"] for s in stats] == [1, 1]  # past its window
        assert parts_left(tmp_url) == 0
    finally:
        store.close()


@pytest.mark.ray
@pytest.mark.parametrize("phase,visible", [("prepared", False), ("decided", True)])
def test_a_driver_killed_during_a_commit_through_the_running_store(ray_cluster, tmp_url, phase,
                                                                   visible):
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(txn_timeout_s=1.0), shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
        kill_driver_at(tmp_url, phase, name, ray_cluster.get_runtime_context().gcs_address)
        # Each shard decides its part after txn_timeout_s: installed if committed, else dropped.
        wait_until(lambda: parts_left(tmp_url) == 0, timeout=30)
        assert store.get_many(KEYS) == [b"new" if visible else b"old"] * N
        with store.snapshot() as snap:
            assert snap.get_many(KEYS) == [b"new" if visible else b"old"] * N
    finally:
        store.close()


@pytest.mark.ray
def test_a_cut_installs_a_committed_bulk_write_it_finds_half_applied(ray_cluster, tmp_url):
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(txn_timeout_s=60.0), shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
        kill_driver_at(tmp_url, "partly", name, ray_cluster.get_runtime_context().gcs_address)
        wait_until(lambda: parts_left(tmp_url) == 1)  # shard 1's waits a minute for a decision
        checkpoint = store.checkpoint()  # the cut installs it before it takes the checkpoint
        with lr.reader(tmp_url, checkpoint.id) as r:
            assert r.get_many(KEYS) == [b"new"] * N
        wait_until(lambda: parts_left(tmp_url) == 0)
    finally:
        store.close()


@pytest.mark.ray
def test_a_streaming_batch_sent_again_installs_what_its_committed_attempt_left(ray_cluster,
                                                                               tmp_url):
    """A retried micro-batch finds its earlier attempt committed, but installed in shard 0
    only (the apply call to shard 1 failed, and its part waits for a decision): the retry
    answers once shard 1 installed it too, so every key is visible when it returns."""
    from leveled_ray.manifest.txn_records import claim_stream_batch

    name = f"bulk-{uuid.uuid4().hex[:8]}"
    address = ray_cluster.get_runtime_context().gcs_address
    store = lr.open(tmp_url, lr.Options(txn_timeout_s=60.0), shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
        txn, _ = run_sync(claim_stream_batch(ObjectStore.from_url(tmp_url), "w", 0))
        kill_driver_at(tmp_url, "partly", name, address, txn)
        wait_until(lambda: parts_left(tmp_url) == 1)  # shard 1's waits a minute
        assert _stream_batch(tmp_url, b"again", ("w", 0), store_name=name,
                             ray_address=address) == 0
        assert store.get_many(KEYS) == [b"new"] * N
        wait_until(lambda: parts_left(tmp_url) == 0)
    finally:
        store.close()


def _stream_batch(url: str, value: bytes, mark: tuple[str, int], **through) -> int:
    """One streaming micro-batch of every key, in two partitions, committed with ``mark``
    (``through``: ``store_name`` and ``ray_address`` of a running store)."""
    plan = bulk.begin_write(url, **through)
    rows = pa.record_batch({"bucket": [b for b, _ in KEYS], "key": [k for _, k in KEYS],
                            "value": [value] * N})
    messages = [bulk.write_partition(plan, p, [rows.slice(p * N // 2, N // 2)]) for p in (0, 1)]
    return bulk.commit(plan, messages, mark)


def test_a_streaming_batch_sent_again_changes_no_shard_and_a_dead_attempt_is_aborted(tmp_url):
    """A micro-batch committed across shards is found by a later attempt of the same batch
    (which then changes nothing); an attempt whose driver died prepared but undecided is
    aborted by the next attempt, which commits; GC drops a writer's older batches' records
    only."""
    from leveled_ray.bulk.write import gather_files
    from leveled_ray.manifest.txn_records import (
        TXN_PREFIX,
        claim_name,
        claim_stream_batch,
        record_name,
        stream_txn,
    )

    new_sharded(tmp_url)
    root = ObjectStore.from_url(tmp_url)
    assert _stream_batch(tmp_url, b"v0", ("w", 0)) == N
    assert _stream_batch(tmp_url, b"again", ("w", 0)) == 0  # Spark ran batch 0 again
    assert values(tmp_url) == [b"v0"] * N
    assert _stream_batch(tmp_url, b"v1", ("w", 1)) == N
    assert _stream_batch(tmp_url, b"other", ("x", 0)) == N  # another writer, its own batch 0
    assert values(tmp_url) == [b"other"] * N

    # A driver died after preparing its attempt of batch 2, before deciding it.
    plan = bulk.begin_write(tmp_url)
    rows = pa.record_batch({"bucket": ["b"] * N, "key": [k for _, k in KEYS],
                            "value": [b"dead"] * N})
    messages = [bulk.write_partition(plan, 0, [rows])]
    dead, _ = run_sync(claim_stream_batch(root, "w", 2))
    run_sync(bulk.prepare(plan, dead, {s: gather_files(p) for s, p in
                                       bulk.shard_files(plan, messages).items()}))
    assert parts_left(tmp_url) == 2
    assert _stream_batch(tmp_url, b"v2", ("w", 2)) == N  # aborts the dead attempt, commits
    assert values(tmp_url) == [b"v2"] * N
    assert _stream_batch(tmp_url, b"again", ("w", 2)) == 0
    assert values(tmp_url) == [b"v2"] * N
    bulk.begin_write(tmp_url)  # settles the dead attempt's parts: dropped
    assert parts_left(tmp_url) == 0

    lr.gc(tmp_url, min_age=0)
    # writer w keeps its newest batch's records (two attempts), x its only batch's
    kept = [stream_txn("w", 2, 0), stream_txn("w", 2, 1), stream_txn("x", 0, 0)]
    assert sorted(m.path for m in root.list(TXN_PREFIX)) == sorted(
        [record_name(t) for t in kept] + [claim_name(t) for t in kept])
    assert _stream_batch(tmp_url, b"again", ("w", 2)) == 0  # still found after GC
    assert values(tmp_url) == [b"v2"] * N


def _bulk_rows(value: bytes) -> pa.RecordBatch:
    return pa.record_batch({"bucket": ["b"] * N, "key": [k for _, k in KEYS],
                            "value": [value] * N})


def _bulk_write(url: str, value: bytes) -> None:
    """Every key of :data:`KEYS` set to ``value`` by one bulk write at rest."""
    plan = bulk.begin_write(url)
    bulk.commit(plan, [bulk.write_partition(plan, 0, [_bulk_rows(value)])])


def test_a_bulk_write_begun_before_a_split_at_rest_is_refused_whole(tmp_url):
    """A bulk write planned on the layout before a split is refused at its commit, with
    nothing of it visible: its parts would have gone into a retired shard (once, half of such
    a write was committed, and never installed). Run again, it commits whole."""
    new_sharded(tmp_url)
    _bulk_write(tmp_url, b"old")
    plan = bulk.begin_write(tmp_url)
    messages = [bulk.write_partition(plan, 0, [_bulk_rows(b"new")])]
    lr.admin(tmp_url).split_shard(0)
    with pytest.raises(lr.ConflictError, match="split"):
        bulk.commit(plan, messages)
    assert values(tmp_url) == [b"old"] * N  # none of it, in every shard
    assert parts_left(tmp_url) == 0
    _bulk_write(tmp_url, b"new")
    assert values(tmp_url) == [b"new"] * N


def test_a_split_refuses_a_part_prepared_after_its_first_look(tmp_url):
    """A bulk write's part prepared in the shard between the split's first look and its
    claim is seen by its second look, after the claim: the split is refused and changes no
    layout, and the bulk write then commits whole."""
    from leveled_ray.bulk.write import gather_files
    from leveled_ray.cluster.split import split_shard

    new_sharded(tmp_url)
    _bulk_write(tmp_url, b"old")
    plan = bulk.begin_write(tmp_url)
    messages = [bulk.write_partition(plan, 0, [_bulk_rows(b"new")])]
    files = {s: gather_files(p) for s, p in bulk.shard_files(plan, messages).items()}

    looked, go, ended = threading.Event(), threading.Event(), {}

    def pause(step: str) -> None:
        if step == "quiet":  # the split looked: no part yet
            looked.set()
            go.wait(60)

    def split() -> None:
        try:
            run_sync(split_shard(tmp_url, 0, lr.Options(), after_step=pause))
            ended["error"] = None
        except Exception as exc:
            ended["error"] = exc

    splitter = threading.Thread(target=split)
    splitter.start()
    assert looked.wait(60)
    run_sync(bulk.prepare(plan, "t-late", files))
    go.set()
    splitter.join(60)
    assert isinstance(ended["error"], lr.InvalidArgumentError), ended
    assert "cross-shard batch" in str(ended["error"])
    assert lr.admin(tmp_url).shards == 2
    run_sync(decide(ObjectStore.from_url(tmp_url), "t-late", COMMIT))
    run_sync(bulk.apply(plan, "t-late", sorted(files)))
    assert values(tmp_url) == [b"new"] * N


@pytest.mark.ray
def test_a_part_object_that_lands_again_after_its_install_is_known_as_installed(ray_cluster,
                                                                              tmp_url):
    """A create of a part object can land after the part was installed and deleted (a copy
    of a hedged create, or an attempt that timed out, reaching the store late). The shard,
    reopened after it gave out later SQNs, finds the committed part again: it is known as
    installed (the shard gave out SQNs above its window), not installed twice or refused for
    good."""
    new_sharded(tmp_url)
    kill_driver_at(tmp_url, "decided")
    shards = [ObjectStore.from_url(f"{tmp_url}/shard-{s:03d}") for s in (0, 1)]
    parts = [{m.path: store.get(m.path) for m in store.list("txn/")} for store in shards]
    assert [len(p) for p in parts] == [1, 1]
    with lr.open(tmp_url) as store:
        assert store.get_many(KEYS) == [b"new"] * N
        wait_until(lambda: parts_left(tmp_url) == 0)
        store.put_many([lr.Put(b, k, b"later") for b, k in KEYS])  # later SQNs in each shard
        store.compact_journal(wait=True)  # the parts' journal files are rewritten
    for shard, found in enumerate(parts):
        written = {j.name for name, data in found.items() for j in decode_part(data, name).files[0]}
        latest = run_sync(ManifestStore(shards[shard]).latest()).manifest
        assert written and not written & {j.name for j in latest.journal}
    for store, found in zip(shards, parts):  # the late copies land
        for name, data in found.items():
            store.put(name, data)
    with lr.open(tmp_url) as store:
        assert store.get_many(KEYS) == [b"later"] * N
        wait_until(lambda: parts_left(tmp_url) == 0)
        assert [s["txn_applied_before"] for s in store.stats()["shards"]] == [1, 1]
