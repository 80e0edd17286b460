"""A cross-shard put_many is all or nothing when the client is killed (-9) at each phase of its
commit, and when a shard's Bookie is killed at each phase."""

import asyncio
import uuid

import pytest
from support.waits import kill_actor, run_until_ready_then_kill, wait_until

import leveled_ray as lr
from leveled_ray.client.shard_side import ShardSide
from leveled_ray.cluster.fanout import shard_groups
from leveled_ray.codec import checked_key
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest.txn_records import COMMIT, decide

pytestmark = pytest.mark.ray

KEYS = [("b", f"k{i:02d}") for i in range(16)]
OPTIONS = lr.Options(txn_timeout_s=1.0)

#: A client that runs the commit protocol up to a phase, says so, and waits to be killed:
#: ``prepared`` (every part prepared, undecided), ``decided`` (the record says commit, nothing
#: applied) or ``partly`` (one shard applied its part).
CLIENT = """
import asyncio, sys, time
import leveled_ray as lr
from leveled_ray.cluster.fanout import shard_groups
from leveled_ray.client.shard_side import ShardSide
from leveled_ray.codec import checked_key
from leveled_ray.files.store import ObjectStore
from leveled_ray.manifest.txn_records import COMMIT, decide

name, address, txn, phase = sys.argv[1:5]
store = lr.connect(name, address=address)
items = [lr.Put("b", f"k{i:02d}", b"new") for i in range(16)]
groups = shard_groups([checked_key(i.bucket, i.key, store.options) for i in items],
                      store.shard_map)

async def run():
    for shard, where in groups.items():
        part = ShardSide(store.shard(shard)).checked_changes([items[i] for i in where])
        assert isinstance(await ShardSide(store.shard(shard)).prepare(txn, store.url, *part), tuple)
    if phase != "prepared":
        await decide(ObjectStore.from_url(store.url, store.options), txn, COMMIT)
    if phase == "partly":
        await ShardSide(store.shard(next(iter(groups)))).commit_part(txn)

asyncio.run(run())
print("READY", flush=True)
time.sleep(600)
"""


def settled(store) -> bool:
    return all(s["txn_prepared_now"] == 0 for s in store.stats()["shards"])


def no_parts_left(url: str, shards: int) -> bool:
    return all(not ObjectStore.from_url(f"{url}/shard-{s:03d}").list("txn/")
               for s in range(shards))


@pytest.mark.parametrize("phase,visible", [("prepared", False), ("decided", True),
                                           ("partly", True)])
def test_a_client_killed_at_any_phase_leaves_all_or_nothing(ray_cluster, tmp_url, phase,
                                                            visible):
    name = f"txn-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, OPTIONS, shards=2, name=name)
    try:
        store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
        run_until_ready_then_kill(CLIENT, name, ray_cluster.get_runtime_context().gcs_address,
                                  f"t{uuid.uuid4().hex}", phase)
        # Reads of a key held by an undecided part wait for its decision: never half of it.
        assert store.get_many(KEYS) == [b"new" if visible else b"old"] * len(KEYS)
        wait_until(lambda: settled(store), timeout=30)
        assert no_parts_left(tmp_url, 2)
        assert [v for _, _, v in store.fold_objects("b")] == [b"new" if visible
                                                               else b"old"] * len(KEYS)
        store.put("b", "k00", b"later")  # the keys take writes again
        assert store.get("b", "k00") == b"later"
    finally:
        store.close()


def _prepare(store, txn: str, shards) -> None:
    items = [lr.Put(b, k, b"new") for b, k in KEYS]
    groups = shard_groups([checked_key(b, k, store.options) for b, k in KEYS], store.shard_map)
    for shard in shards:
        part = ShardSide(store.shard(shard)).checked_changes([items[i] for i in groups[shard]])
        assert isinstance(run_sync(ShardSide(store.shard(shard)).prepare(txn, store.url, *part)),
                          tuple)


@pytest.mark.parametrize("phase,visible", [("prepared", False), ("decided", True)])
def test_a_shard_killed_at_any_phase_settles_its_part_when_it_reopens(ray_cluster, tmp_url,
                                                                      phase, visible):

    store = lr.open(tmp_url, OPTIONS, shards=2)
    store.put_many([lr.Put(b, k, b"old") for b, k in KEYS])
    txn = f"t{uuid.uuid4().hex}"
    _prepare(store, txn, (0, 1))
    if phase == "decided":
        asyncio.run(decide(ObjectStore.from_url(tmp_url), txn, COMMIT))
        run_sync(ShardSide(store.shard(0)).commit_part(txn))
    kill_actor(store.shard(1).actors()[0])  # shard 1 dies holding its part
    with pytest.raises(lr.StoreClosedError):
        store.shard(1).get("b", "k00")
    store.close()  # the live shard closes; the dead one is gone already
    again = lr.open(tmp_url, OPTIONS)
    try:
        assert again.get_many(KEYS) == [b"new" if visible else b"old"] * len(KEYS)
        recovered = [s["txn_recovered"] for s in again.stats()["shards"]]
        assert recovered[1] == 1
        assert no_parts_left(tmp_url, 2)
    finally:
        again.close()


def test_a_batch_whose_keys_stay_held_past_txn_timeout_raises_conflict(ray_cluster, tmp_path):
    """A part whose decision cannot be recorded (its root is unusable) keeps its keys locked;
    a batch that needs one of them gives up after txn_timeout_s with ConflictError, having
    written nothing, and goes through once the part is dropped."""
    url = f"file://{tmp_path}/db"
    blocked_root = tmp_path / "not-a-directory"
    blocked_root.write_bytes(b"")
    store = lr.open(url, lr.Options(txn_timeout_s=0.5), shards=2)
    try:
        items = [lr.Put(b, k, b"new") for b, k in KEYS]
        groups = shard_groups([checked_key(b, k, store.options) for b, k in KEYS],
                              store.shard_map)
        assert set(groups) == {0, 1}
        holder = f"t{uuid.uuid4().hex}"
        held = groups[0][0]
        part = ShardSide(store.shard(0)).checked_changes([items[held]])
        assert isinstance(run_sync(ShardSide(store.shard(0)).prepare(
            holder, f"file://{blocked_root}/root", *part)), tuple)
        with pytest.raises(lr.ConflictError):
            store.put_many(items)
        others = [k for i, k in enumerate(KEYS) if i != held]  # reads of the held key wait
        assert store.get_many(others) == [None] * len(others)  # nothing of the batch landed
        assert store.stats()["shards"][0]["txn_busy"] >= 1
        run_sync(ShardSide(store.shard(0)).abort_part(holder))
        store.put_many(items)
        assert store.get_many(KEYS) == [b"new"] * len(KEYS)
    finally:
        store.close()
