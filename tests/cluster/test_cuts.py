"""Consistent cuts: snapshots and checkpoints of a sharded store hold one moment of every shard,
while writers write across shards."""

import threading

import pytest

import leveled_ray as lr

pytestmark = pytest.mark.ray

ROUNDS = 100


def keys_in(store, shard: int, count: int) -> list[str]:
    """``count`` keys of bucket ``b`` that live in ``shard``."""
    out, i = [], 0
    while len(out) < count:
        if store.shard_of("b", f"k{i}") == shard:
            out.append(f"k{i}")
        i += 1
    return out


def held_together(read, a_keys, b_keys, batches) -> int:
    """Check one cut (``read(pairs)`` gives its values): no B without its A, and every batch
    all or nothing. Returns how many B it holds."""
    a = read([("b", k) for k in a_keys])
    b = read([("b", k) for k in b_keys])
    for i, (got_a, got_b) in enumerate(zip(a, b)):
        assert got_b is None or got_a is not None, f"B{i} without A{i}"
    for batch in batches:
        got = read([("c", k) for k in batch])
        assert all(v is None for v in got) or all(v is not None for v in got), got
    return sum(v is not None for v in b)


def test_no_cut_holds_a_later_write_without_an_earlier_one(ray_cluster, tmp_url):
    store = lr.open(tmp_url, shards=2)
    try:
        a_keys, b_keys = keys_in(store, 0, ROUNDS), keys_in(store, 1, ROUNDS)
        batches = [[f"x{j}-{i}" for i in range(8)] for j in range(ROUNDS // 10)]
        done = threading.Event()

        def write():
            for i in range(ROUNDS):
                store.put("b", a_keys[i], b"a")  # acknowledged ...
                store.put("b", b_keys[i], b"b")  # ... before this one is sent
                if i % 10 == 0:  # an atomic batch across both shards
                    store.put_many([lr.Put("c", k, b"x") for k in batches[i // 10]])
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        seen, checkpoints = [], []
        while not done.is_set():
            with store.snapshot() as snap:
                seen.append(held_together(snap.get_many, a_keys, b_keys, batches))
            checkpoints.append(store.checkpoint(lifetime=600))
        writer.join()
        assert len(seen) >= 3 and seen[-1] <= ROUNDS
        assert any(0 < n < ROUNDS for n in seen)  # cuts landed while writers wrote
        for cp in checkpoints:  # every shard's part of a checkpoint, read without Ray
            readers = [lr.reader(store.shard_map.shard_url(tmp_url, s), cp.id)
                       for s in range(2)]
            try:
                def read(pairs):
                    return [readers[store.shard_of(b, k)].get(b, k) for b, k in pairs]
                held_together(read, a_keys, b_keys, batches)
            finally:
                for r in readers:
                    r.close()
        assert {c.id for c in store.list_checkpoints()} == {c.id for c in checkpoints}
        store.delete_checkpoint(checkpoints[0].id)
        assert checkpoints[0].id not in {c.id for c in store.list_checkpoints()}
        with pytest.raises(lr.CheckpointNotFoundError):
            store.delete_checkpoint(checkpoints[0].id)
        shards = store.stats()["shards"]
        assert all(s["cuts"] >= len(seen) for s in shards)
        assert all(0 < s["cut_pause_ms_max"] < 5000 for s in shards)
    finally:
        store.close()
