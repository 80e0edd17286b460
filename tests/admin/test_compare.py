"""lr.compare (admin/compare.py): an exchange of tictac trees finds exactly the keys that differ
between two stores, at rest without Ray, or running, against a backup and a clone."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import LocalHandle
from leveled_ray.admin.compare import (
    DIFFERENT,
    MISSING_IN_A,
    MISSING_IN_B,
    Difference,
    compare_views,
)
from leveled_ray.cli.main import main as cli
from leveled_ray.client.store import Store
from leveled_ray.clock import ManualClock, system_clock

OPTIONS = lr.Options(metrics_interval_s=0)
KEYS = [f"k{i:02d}" for i in range(30)]
#: What side b does to a key of the common base: how compare must report it.
MUTATIONS = {"change": DIFFERENT, "delete": MISSING_IN_B, "expire": MISSING_IN_B,
             "only_in_a": MISSING_IN_B, "only_in_b": MISSING_IN_A}


async def written(url: str, clock, puts: dict, deletes=(), expiring=()) -> None:
    """A store at ``url`` holding ``puts`` less ``deletes``, with ``expiring`` keys put with a
    TTL of 10 s; closed cleanly, so it is at rest."""
    bookie = Bookie(url, OPTIONS, local=True, clock=clock)
    await bookie.start()
    store = Store(LocalHandle(bookie), OPTIONS, url, None, {"head_only": None}, clock)
    try:
        if puts:
            await store.put_many_async([lr.Put("b", k, v) for k, v in puts.items()])
        for key in expiring:
            await store.put_many_async([lr.Put("b", key, b"short-lived", ttl=10)])
        if deletes:
            await store.put_many_async([lr.Delete("b", k) for k in deletes])
    finally:
        await bookie.close()


@settings(max_examples=20, deadline=None)
@given(base=st.dictionaries(st.sampled_from(KEYS), st.binary(max_size=8), max_size=20),
       mutations=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(sorted(MUTATIONS)),
                                 max_size=8),
       size=st.sampled_from(["xxsmall", "small"]), max_segments=st.integers(1, 4))
def test_compare_finds_exactly_the_keys_that_differ(base, mutations, size, max_segments):
    clock = ManualClock()
    a_puts, b_puts, b_deletes, b_expiring, expected = dict(base), dict(base), [], [], []
    for key, what in mutations.items():
        if what == "only_in_b":
            a_puts.pop(key, None)
            b_puts[key] = b"new"
        elif key not in base:
            continue  # the other mutations act on a key both sides hold
        elif what == "change":
            b_puts[key] = base[key] + b"!"
        elif what == "delete":
            b_deletes.append(key)
        elif what == "expire":
            b_puts.pop(key)
            b_expiring.append(key)
        elif what == "only_in_a":
            b_puts.pop(key)
        expected.append(Difference("b", key, MUTATIONS[what]))
    url_a, url_b = (f"memory://cmp-{uuid.uuid4().hex}" for _ in range(2))

    async def run():
        await written(url_a, clock, a_puts)
        await written(url_b, clock, b_puts, b_deletes, b_expiring)
        clock.advance(60)  # the expiring keys are gone
        with lr.reader(url_a, clock=clock) as a, lr.reader(url_b, clock=clock) as b:
            return await compare_views(a, b, size=size, max_segments=max_segments)

    found = asyncio.run(run())
    assert found.differences == sorted(expected, key=lambda d: d.key)
    assert (found.dirty_segments == 0) == (not expected)
    assert found.rounds == (1 if not expected else 2 + -(-found.dirty_segments // max_segments))


async def written_items(url: str, items: list) -> None:
    """A store at ``url`` holding ``items`` (``lr.Put``s), at rest."""
    bookie = Bookie(url, OPTIONS, local=True)
    await bookie.start()
    store = Store(LocalHandle(bookie), OPTIONS, url, None, {"head_only": None}, system_clock)
    try:
        if items:
            await store.put_many_async(items)
    finally:
        await bookie.close()


@pytest.mark.parametrize("trees", ["kept", "folded"])
def test_a_str_name_and_the_same_bytes_are_two_keys_and_any_bytes_compare(trees):
    """``"k"`` and ``b"k"`` are different keys to compare, as everywhere: a store holding one
    differs from a store holding the other, and one holding both (same value) from an empty
    one (their entries once XORed out); a name that is not UTF-8 compares too. Each
    difference names the key as written. Once with the trees the stores keep, once folded."""
    def url():
        return f"memory://cmp-{uuid.uuid4().hex}"

    str_k, bytes_k, both, empty, raw = url(), url(), url(), url(), url()
    asyncio.run(written_items(str_k, [lr.Put("b", "k", b"v")]))
    asyncio.run(written_items(bytes_k, [lr.Put("b", b"k", b"v")]))
    asyncio.run(written_items(both, [lr.Put("b", "k2", b"v"), lr.Put("b", b"k2", b"v")]))
    asyncio.run(written_items(empty, []))
    asyncio.run(written_items(raw, [lr.Put(b"\xffb", b"\xffraw", b"v")]))
    kw = {} if trees == "kept" else {"bucket": "b"}  # a range compare always folds
    assert lr.compare(str_k, bytes_k, **kw).differences == [
        Difference("b", b"k", MISSING_IN_A), Difference("b", "k", MISSING_IN_B)]
    assert lr.compare(both, empty, **kw).differences == [
        Difference("b", b"k2", MISSING_IN_B), Difference("b", "k2", MISSING_IN_B)]
    assert lr.compare(raw, empty).differences == [
        Difference(b"\xffb", b"\xffraw", MISSING_IN_B)]


def test_compare_refuses_bad_input():
    url = f"memory://cmp-{uuid.uuid4().hex}"
    asyncio.run(written(url, system_clock, {"k": b"v"}))
    for bad in ({"size": "huge"}, {"max_segments": 0}, {"max_segments": True}):
        with pytest.raises(lr.InvalidArgumentError):
            lr.compare(url, url, **bad)
    with pytest.raises(lr.InvalidArgumentError):
        lr.compare(url, 42)
    assert lr.compare(url, url).equal


@pytest.mark.ray
def test_a_store_equals_its_backup_and_its_clone_until_the_clone_changes(ray_cluster,
                                                                         tmp_path, capsys):
    url = f"file://{tmp_path}/db"
    store = lr.open(url, shards=2)
    try:
        store.put_many([lr.Put("b", f"k{i}", b"v%d" % i) for i in range(300)])
        store.delete("b", "k7")
        store.backup(f"file://{tmp_path}/backup", progress=False)
        checkpoint = store.checkpoint(lifetime=600)
        backup, clone_url = f"file://{tmp_path}/backup", f"file://{tmp_path}/clone"
        clone = lr.clone(url, clone_url, checkpoint.id)
        try:
            assert lr.compare(store, backup).equal
            same = lr.compare(store, clone)
            assert same.equal and same.rounds == 1
            clone.put("b", "k1", b"changed")
            clone.delete("b", "k2")
            clone.put("b", "new", b"x")
            found = lr.compare(store, clone, size="xxsmall")
            assert found.differences == [Difference("b", "k1", DIFFERENT),
                                         Difference("b", "k2", MISSING_IN_B),
                                         Difference("b", "new", MISSING_IN_A)]
            assert 0 < found.bytes_exchanged < 8192 and found.rounds == 3  # 3 branches of 2 KiB
        finally:
            clone.close()
        capsys.readouterr()  # both at rest now: compared without Ray
        assert cli(["compare", "--url", backup, backup]) == 0
        assert cli(["compare", "--url", backup, clone_url]) == 1
        out = capsys.readouterr().out
        assert "different     b\tk1" in out and "3 difference(s)" in out
    finally:
        store.close()


def test_a_sharded_sides_tree_is_the_xor_merge_of_its_shards_trees(tmp_path):
    """A view of one part per shard (as a sharded snapshot or reader is) folds each part and
    XOR-merges their trees: the tree of all their keys, as one store holding them has."""
    from leveled_ray.admin.compare import FoldedSide

    halves = [{k: k.encode() for k in KEYS[:15]}, {k: k.encode() for k in KEYS[15:]}]
    urls = [f"file://{tmp_path}/shard{i}" for i in range(2)] + [f"file://{tmp_path}/all"]
    for url, puts in zip(urls, [*halves, {**halves[0], **halves[1]}]):
        asyncio.run(written(url, system_clock, puts))
    readers = [lr.reader(url, options=OPTIONS) for url in urls]
    try:
        class Sharded:
            parts = readers[:2]

        merged = asyncio.run(FoldedSide.fold(Sharded(), "xxsmall"))
        parts = [asyncio.run(FoldedSide.fold(r, "xxsmall")) for r in readers]
        assert merged.tree == parts[0].tree.merge(parts[1].tree) == parts[2].tree
        assert merged.tree != parts[0].tree
        everything = list(range(4096))
        assert asyncio.run(merged.entries(everything)) == asyncio.run(
            parts[2].entries(everything))
    finally:
        for r in readers:
            r.close()


def test_a_range_compare_sees_only_its_bucket_and_keys():
    """Range trees (leveled's ``tictactree_obj``): given a bucket, and keys within it, a
    compare folds and reports only that range; a key range without its bucket is refused."""
    url_a, url_b = (f"memory://cmp-{uuid.uuid4().hex}" for _ in range(2))
    base = {(bucket, f"k{i:02d}"): b"v" for bucket in ("b1", "b2") for i in range(20)}
    other = {**base, ("b1", "k03"): b"new", ("b1", "k15"): b"new", ("b2", "k03"): b"new"}
    del other[("b1", "k07")]

    async def fill(url, objects):
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        store = Store(LocalHandle(bookie), OPTIONS, url, None, {"head_only": None},
                      system_clock)
        await store.put_many_async([lr.Put(b, k, v) for (b, k), v in objects.items()])
        await bookie.close()

    asyncio.run(fill(url_a, base))
    asyncio.run(fill(url_b, other))

    def found(**span):
        return [(d.bucket, d.key, d.kind) for d in lr.compare(url_a, url_b, **span).differences]

    assert found() == [("b1", "k03", DIFFERENT), ("b1", "k07", MISSING_IN_B),
                       ("b1", "k15", DIFFERENT), ("b2", "k03", DIFFERENT)]
    assert found(bucket="b1") == [("b1", "k03", DIFFERENT), ("b1", "k07", MISSING_IN_B),
                                  ("b1", "k15", DIFFERENT)]
    assert found(bucket="b1", start_key="k05", end_key="k15") == [
        ("b1", "k07", MISSING_IN_B), ("b1", "k15", DIFFERENT)]
    assert found(bucket="b2", start_key="k04") == []
    assert cli(["compare", "--url", url_a, url_b, "--bucket", "b2", "--start-key", "k04"]) == 0
    assert cli(["compare", "--url", url_a, url_b, "--bucket", "b2"]) == 1
    with pytest.raises(lr.InvalidArgumentError, match="need a bucket"):
        lr.compare(url_a, url_b, start_key="k05")


def test_a_readers_life_lists_its_store_six_times(tmp_path):
    """What a compare of stores at rest pays per side for its reader: at open, a listing of
    the manifest versions, one from the version just read (to make its checkpoint there),
    one of the journal's tail, and one asking whether its checkpoint's version was
    superseded; nothing more for its first read (it knows the version its checkpoint pins);
    at close, a listing of the versions and the superseded check. Only the two listings of
    every version grow with the versions GC has not yet deleted."""
    url = f"file://{tmp_path}/db"
    asyncio.run(written(url, system_clock, {"k": b"v"}))
    reader = lr.reader(url, options=OPTIONS)
    assert reader.get("b", "k") == b"v"
    read = reader.stats()["io"]
    reader.close()
    closed = reader.stats()["io"]
    assert (read["lists"], read["puts"]) == (4, 1)  # one put: the checkpoint
    assert (closed["lists"], closed["puts"]) == (6, 2)  # its delete
