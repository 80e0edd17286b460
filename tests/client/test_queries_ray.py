"""Queries through real Ray actors (leveled's iterator_SUITE, by meaning): index counts over
many ranges, regex, paging, removal by delete and replace, restarts, folds over buckets,
breaking folds, expiry, head_only modes, and queries on snapshots in Ray tasks."""

import asyncio
import itertools
import pickle
import random
import re

import pyarrow as pa
import pytest
import ray
from support.stores import persisted
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.clock import ManualClock
from leveled_ray.errors import InvalidArgumentError

pytestmark = pytest.mark.ray

SMALL = lr.Options(ledger=dict(l0_max_keys=200, push_keys=50, push_ms=5, sst_max_keys=150,
                               sst_block_bytes=1024), journal=dict(compaction_interval_s=0))
WORDS = ["alpha", "apple", "axe", "bravo", "beta", "charlie", "delta", "echo", "eagle", "fox"]


def write_indexed(store, rng, n, bucket="b"):
    """``n`` objects with a name_bin and an age_int term each; returns the model."""
    model = {}
    items = []
    for i in range(n):
        key = f"k{i:05d}"
        terms = {("name_bin", rng.choice(WORDS) + str(rng.randrange(5))),
                 ("age_int", rng.randrange(100))}
        model[key] = terms
        items.append(lr.Put(bucket, key, b"v%d" % i, indexes=[("add", f, t) for f, t in terms]))
    for start in range(0, n, 200):
        store.put_many(items[start:start + 200])
    return model


def expected(model, field, start, end):
    return sorted((t, k) for k, terms in model.items() for f, t in terms
                  if f == field and start <= t <= end)


def check_counts(store, model, rng, rounds=12):
    for _ in range(rounds):
        a, b = sorted(rng.sample(range(100), 2))
        assert list(store.index_query("b", "age_int", a, b, return_terms=True)) == \
            expected(model, "age_int", a, b)
        lo, hi = sorted(rng.sample(WORDS, 2))
        want = expected(model, "name_bin", lo, hi + "~")
        assert list(store.index_query("b", "name_bin", lo, hi + "~")) == [k for _, k in want]


def test_index_queries_counts_regex_paging_delete_replace_and_restart(ray_cluster, tmp_url):
    rng = random.Random(5)
    with lr.open(tmp_url, SMALL) as store:
        model = write_indexed(store, rng, 1200)
        write_indexed(store, random.Random(6), 300, bucket="other")  # must never leak in
        check_counts(store, model, rng)

        # Regex: the same as filtering the range's terms with Python's re.search.
        pattern = re.compile(r"^a.*e\d$")
        got = list(store.index_query("b", "name_bin", "a", "z", term_regex=pattern.pattern,
                                     return_terms=True))
        assert got == [tk for tk in expected(model, "name_bin", "a", "z")
                       if pattern.search(tk[0])] and got

        # Paging: continue from the last (term, key) until the range is exhausted.
        pages, start, start_key = [], 10, None
        while True:
            page = list(store.index_query("b", "age_int", start, 60, return_terms=True,
                                          start_key=start_key, max_results=37))
            pages.append(page)
            if len(page) < 37:
                break
            start, start_key = page[-1]
        assert [r for page in pages for r in page] == expected(model, "age_int", 10, 60)
        assert len(pages) > 3 and all(len(p) == 37 for p in pages[:-1])

        # Deletes remove every term (none given); a replace removes what it names.
        for key in rng.sample(sorted(model), 100):
            store.delete("b", key)
            del model[key]
        for key in rng.sample(sorted(model), 100):
            old = next(t for f, t in model[key] if f == "age_int")
            store.put("b", key, b"new", indexes=[("remove", "age_int", old),
                                                  ("add", "age_int", 200 + old)])
            model[key] = (model[key] - {("age_int", old)}) | {("age_int", 200 + old)}
        check_counts(store, model, rng)
        assert len(list(store.index_query("b", "age_int", 200, 299))) == 100
        key = next(iter(model))
        assert set(store.head("b", key).indexes) == model[key]

    with lr.open(tmp_url, SMALL) as store:  # counts survive a restart
        check_counts(store, model, rng)


def test_folds_over_buckets_in_both_orders_and_arrow(ray_cluster, tmp_url):
    rng = random.Random(7)
    with lr.open(tmp_url, SMALL) as store:
        assert store.is_empty() and store.list_buckets() == []
        model = {}
        for i in range(900):
            bucket = rng.choice(["b1", "b2", "b3", b"raw"])
            key = f"k{rng.randrange(600):04d}"
            value = b"%d" % i
            store.put(bucket, key, value, metadata={"i": i})
            model[(bucket, key)] = value
        for bucket, key in rng.sample(sorted(model, key=repr), 50):
            store.delete(bucket, key)
            del model[(bucket, key)]
        store.delete("b9", "never-there")

        def by_key(pairs):
            return sorted(pairs, key=lambda p: (isinstance(p[0], str), p[0], p[1]))

        want_keys = by_key(model)
        assert list(store.fold_keys(batch_size=64)) == want_keys
        assert store.list_buckets() == [b"raw", "b1", "b2", "b3"] and not store.is_empty()
        assert list(store.fold_keys("b2", "k0100", "k0300")) == [
            (b, k) for b, k in want_keys if b == "b2" and "k0100" <= k <= "k0300"]
        objects = list(store.fold_objects(batch_size=100))
        assert objects == [(b, k, model[(b, k)]) for b, k in want_keys]
        by_sqn = list(store.fold_objects(order="sqn", batch_size=100))
        assert sorted(by_sqn, key=repr) == sorted(objects, key=repr)
        heads = list(store.fold_heads("b1"))
        assert [(b, k) for b, k, _ in heads] == [p for p in want_keys if p[0] == "b1"]
        assert all(h.metadata["i"] == int(model[(b, k)]) for b, k, h in heads)

        batches = list(store.fold_objects_batches("b3", batch_size=50))
        assert all(isinstance(b, pa.RecordBatch) for b in batches)
        assert all(b.num_rows == 50 for b in batches[:-1])
        table = pa.Table.from_batches(batches)
        assert table.column("value").to_pylist() == [model[p] for p in want_keys
                                                     if p[0] == "b3"]
        raw = pa.Table.from_batches(list(store.fold_keys_batches(binary_names=True)))
        assert raw.num_rows == len(model) and raw.schema.field("key").type == pa.binary()
        assert pa.Table.from_batches(list(store.fold_heads_batches("b1"))).num_rows == len(heads)


def test_breaking_a_fold_releases_its_snapshot(ray_cluster, tmp_url):
    with lr.open(tmp_url, SMALL) as store:
        store.put_many([lr.Put("b", f"k{i:04d}", b"v") for i in range(500)])
        taken = []
        for pair in store.fold_keys(batch_size=10):
            taken.append(pair)
            if len(taken) == 25:
                break
        assert taken == [("b", f"k{i:04d}") for i in range(25)]
        assert list(itertools.islice(store.fold_objects(), 7))[-1] == ("b", "k0006", b"v")
        with store.fold_heads() as fold:
            next(fold)
        unstarted = store.index_query("b", "x_bin", "a", "b")
        del unstarted
        wait_until(lambda: store.stats()["penciller"]["snapshots"] == 0
                   and store.stats()["inker"]["snapshots"] == 0)


def test_a_fold_sees_one_point_in_time(ray_cluster, tmp_url):
    with lr.open(tmp_url, SMALL) as store:
        store.put_many([lr.Put("b", f"k{i:04d}", b"old") for i in range(400)])
        fold = store.fold_objects(batch_size=20)
        first = next(fold)
        store.put_many([lr.Put("b", f"k{i:04d}", b"new") for i in range(400)])
        store.put("b", "zzz", b"late")
        # Another query while this one is paused (reads in flight share the file cache).
        assert [v for _, _, v in store.fold_objects("b", "k0000", "k0001")] == [b"new"] * 2
        rest = list(fold)
        assert [first, *rest] == [("b", f"k{i:04d}", b"old") for i in range(400)]


def test_expired_objects_vanish_from_every_query(ray_cluster, tmp_url):
    with lr.open(tmp_url, SMALL, clock=ManualClock()) as store:
        store.put("b", "short", b"v", ttl=600, indexes=[("add", "f_bin", "x")])
        store.put("gone", "short", b"v", ttl=600)
        store.put("b", "long", b"v", indexes=[("add", "f_bin", "x")])
        assert list(store.index_query("b", "f_bin", "x", "x")) == ["long", "short"]
        # Past both expiries: each TTL runs from its own put, a round trip apart.
        expiry = max(store.head(b, "short").expires_at for b in ("b", "gone"))
        store.clock.advance(expiry - store.clock() + 0.1)
        assert store.get("b", "short") is None and store.head("b", "short") is None
        assert list(store.fold_keys()) == [("b", "long")]
        assert [k for _, k, _ in store.fold_heads()] == ["long"]
        assert [k for _, k, _ in store.fold_objects()] == ["long"]
        assert [k for _, k, _ in store.fold_objects(order="sqn")] == ["long"]
        assert list(store.index_query("b", "f_bin", "x", "x")) == ["long"]
        assert store.list_buckets() == ["b"]


def test_one_get_many_over_every_place_a_key_can_be(ray_cluster, tmp_url):
    """One batch mixes keys in the Bookie's cache, in L0 and deeper files (some in several,
    the newest winning), missing, repeated, deleted and expired."""
    rng = random.Random(5)
    with lr.open(tmp_url, SMALL, clock=ManualClock()) as store:
        model: dict = {}
        for round_ in range(3):  # rewrites sink older versions into deeper files
            keys = rng.sample(range(1500), 900)
            store.put_many([lr.Put("b", f"k{i:04d}", b"r%d-%d" % (round_, i)) for i in keys])
            model.update({f"k{i:04d}": b"r%d-%d" % (round_, i) for i in keys})
        for i in rng.sample(sorted(model), 100):
            store.delete("b", i)
            del model[i]
        short = rng.sample(sorted(model), 50)
        store.put_many([lr.Put("b", k, b"short", ttl=600) for k in short])

        def files() -> int:
            ledger = store.stats()["penciller"]
            return ledger["l0_files"] + sum(ledger["level_files"])

        wait_until(lambda: files() >= 2)  # versions of keys in several files
        store.put_many([lr.Put("b", f"k{i:04d}", b"cached") for i in range(1500, 1520)])
        model.update({f"k{i:04d}": b"cached" for i in range(1500, 1520)})
        store.clock.advance(store.head("b", short[0]).expires_at - store.clock() + 0.1)
        for k in short:
            del model[k]
        asked = [f"k{i:04d}" for i in rng.choices(range(1600), k=1000)]
        got = store.get_many([("b", k) for k in asked])
        assert got == [model.get(k) for k in asked]
        assert [h is not None for h in store.head_many([("b", k) for k in asked])] == [
            k in model for k in asked]


@pytest.mark.parametrize("mode", ["with_lookup", "no_lookup"])
def test_head_only_stores(ray_cluster, tmp_url, mode):
    options = SMALL.replace(max_head_only_value_bytes=64)
    with lr.open(tmp_url, options, head_only=mode) as store:
        # A head-only store trims its Journal as soon as the Ledger holds it: a lease keeps
        # the history that the feed reads below.
        store.set_history_lease("feed", 0, 300)
        for start in range(0, 1000, 100):
            store.put_many([lr.Put("seg", f"k{i:04d}", b"h%d" % i, metadata={"n": i})
                            for i in range(start, start + 100)])
        heads = list(store.fold_heads("seg"))
        assert [(k, h.value, h.metadata["n"]) for _, k, h in heads] == [
            (f"k{i:04d}", b"h%d" % i, i) for i in range(1000)]
        # The change feed carries the values and metadata packed in the Journal's entries.
        assert [(c.key, c.value, c.metadata) for c in store.changes(until=3)] == [
            (f"k{i:04d}", b"h%d" % i, {"n": i}) for i in range(3)]
        assert [c.value for c in store.changes(until=2, values=False)] == [None, None]
        if mode == "with_lookup":
            assert store.head("seg", "k0007").value == b"h7"
        else:
            with pytest.raises(InvalidArgumentError, match="folds only"):
                store.head("seg", "k0007")
        for refused in (lambda: store.get("seg", "k0001"), lambda: list(store.fold_objects()),
                        lambda: store.put("seg", "x", b"v", indexes=[("add", "f_bin", "a")]),
                        lambda: store.put("seg", "x", b"v" * 65)):
            with pytest.raises(InvalidArgumentError):
                refused()
        assert list(store.fold_keys("seg", "k0998")) == [("seg", "k0998"), ("seg", "k0999")]
        written = store.stats()["inker"]["groups"]
        store.drop_history_lease("feed")
        wait_until(lambda: persisted(store, 800))  # L0 flushes every 200 keys
        store.trim_journal()  # also runs on its own as the Ledger persists
        # Only the files the Ledger does not hold yet (and the newest) stay.
        wait_until(lambda: store.stats()["journal_files"] <= 4, timeout=60)
        assert written >= 10

    with pytest.raises(InvalidArgumentError, match="created with head_only"):
        lr.open(tmp_url, options)
    with lr.open(tmp_url, options, head_only=mode) as store:  # values came from the Ledger
        assert [h.value for _, _, h in store.fold_heads("seg", "k0500", "k0501")] == [
            b"h500", b"h501"]


@ray.remote(num_cpus=0)
def query_in_a_task(snap):
    return list(snap.index_query("b", "n_int", 0, 9)), sum(1 for _ in snap.fold_keys())


def test_queries_on_snapshots_in_ray_tasks_and_async(ray_cluster, tmp_url):
    with lr.open(tmp_url, SMALL) as store:
        store.put_many([lr.Put("b", f"k{i:03d}", b"v", indexes=[("add", "n_int", i % 20)])
                        for i in range(300)])
        with store.snapshot() as snap:
            store.put_many([lr.Put("b", f"z{i:03d}", b"v", indexes=[("add", "n_int", 1)])
                            for i in range(50)])
            keys, count = ray.get(query_in_a_task.remote(pickle.loads(pickle.dumps(snap))))
            assert count == 300 and len(keys) == 150 and not any(k.startswith("z") for k in keys)
            assert list(snap.fold_keys("b", "k010", "k011")) == [("b", "k010"), ("b", "k011")]

        async def run():
            got = [k async for k in store.index_query_async("b", "n_int", 1, 1)]
            keys = [p async for p in store.fold_keys_async("b", "z000", "z004")]
            return got, keys, await store.is_empty_async(), await store.list_buckets_async()

        got, keys, empty, buckets = asyncio.run(run())
        assert len(got) == 15 + 50 and len(keys) == 5 and not empty and buckets == ["b"]
        with pytest.raises(InvalidArgumentError):
            store.index_query("b", "n_int", "1", "2")
        with pytest.raises(InvalidArgumentError):
            store.index_query("b", "n_bin", "a", "b", term_regex="(")
        with pytest.raises(InvalidArgumentError):
            store.fold_objects(order="random")
        with pytest.raises(InvalidArgumentError, match="head_only"):
            store.trim_journal()
