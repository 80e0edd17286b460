"""A sharded store on the session's multi-node Ray cluster: placement, routing, the plain
store's API and answers, reopening and connecting, and a dead shard."""

import time
import urllib.request
import uuid

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from prometheus_client.parser import text_string_to_metric_families
from support.waits import kill_actor, wait_until

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def four(ray_cluster, tmp_path_factory):
    """A 4-shard store shared by this module's tests (each writes its own buckets)."""
    url = f"file://{tmp_path_factory.mktemp('four')}/db"
    store = lr.open(url, lr.Options(txn_timeout_s=5), shards=4)
    yield store
    store.close()


def nodes_of(store) -> list[tuple[str, str]]:
    """Each shard's (Bookie node, journal compaction clerk node)."""
    return [(s["process"]["node"], s["compaction"]["process"]["node"])
            for s in store.stats()["shards"]]


def test_shards_spread_over_the_nodes_and_keep_their_actors_together(four):
    four.compact_journal(wait=True)  # starts each shard's compaction clerk
    placed = nodes_of(four)
    assert all(bookie == clerk for bookie, clerk in placed)  # a shard's node
    assert len({bookie for bookie, _ in placed}) == 3  # four shards over all three nodes


def test_every_call_reaches_the_keys_shard_and_answers_in_input_order(four):
    store = four
    assert store.shards == 4
    keys = [("api", f"k{i:03d}") for i in range(200)]
    sqns = [store.put(b, k, k.encode(), indexes=[("add", "n_int", i)])
            for i, (b, k) in enumerate(keys)]
    assert all(sqn > 0 for sqn in sqns)
    assert store.get_many(keys[::-1]) == [k.encode() for _, k in keys[::-1]]
    assert store.get_many([]) == []
    heads = store.head_many(keys + [("api", "none")])
    assert heads[-1] is None and [h.size for h in heads[:-1]] == [4] * 200
    # Each key is where the routing function says, and nowhere else.
    for shard in range(4):
        here = store.shard(shard).get_many(keys)
        assert [v is not None for v in here] == [store.shard_of(b, k) == shard
                                                 for b, k in keys]
    assert len({store.shard_of(b, k) for b, k in keys}) == 4
    # Folds and index queries merge the shards in key order.
    assert list(store.fold_keys("api")) == keys
    assert [v for _, _, v in store.fold_objects("api")] == [k.encode() for _, k in keys]
    assert list(store.index_query("api", "n_int", 10, 19)) == [k for _, k in keys[10:20]]
    page = list(store.index_query("api", "n_int", 5, 199, return_terms=True, max_results=7,
                                  start_key="k005"))
    assert page == [(i, f"k{i:03d}") for i in range(6, 13)]  # after (5, "k005")
    assert "api" in store.list_buckets() and not store.is_empty()
    before = store.stats()["changes"]
    store.delete("api", "k000")
    assert store.get("api", "k000") is None
    stats = store.stats()
    assert stats["changes"] == sum(s["changes"] for s in stats["shards"]) == before + 1


def test_a_put_many_across_shards_is_atomic_and_checks_every_condition_first(four):
    store = four
    keys = [("txn", f"k{i}") for i in range(40)]
    counted = lambda name: sum(s[name] for s in store.stats()["shards"])  # noqa: E731
    committed, aborted = counted("txn_committed"), counted("txn_aborted")
    sqns = store.put_many([lr.Put(b, k, b"v1", if_absent=True) for b, k in keys])
    assert len(sqns) == 40 and store.get_many(keys) == [b"v1"] * 40
    assert len({store.shard_of(b, k) for b, k in keys}) == 4
    # One failed condition in one shard: nothing is written anywhere.
    again = [lr.Put(b, k, b"v2", if_sqn=sqn) for (b, k), sqn in zip(keys, sqns)]
    again[17] = lr.Put("txn", "k17", b"v2", if_absent=True)
    with pytest.raises(lr.ConditionFailedError):
        store.put_many(again)
    assert store.get_many(keys) == [b"v1"] * 40
    again[17] = lr.Put("txn", "k17", b"v2", if_sqn=sqns[17])
    store.put_many(again + [lr.Delete("txn", "k0")])
    assert store.get_many(keys) == [None] + [b"v2"] * 39
    assert counted("txn_committed") - committed == 8  # two batches over four shards
    assert counted("txn_aborted") - aborted == 3  # the failed one: three had prepared
    wait_until(lambda: not ObjectStore.from_url(store.url).list("txn/"))  # records go


def test_batches_racing_for_the_same_keys_each_go_in_whole_one_after_the_other(four):
    """Two writers put_many the same keys across every shard at once: a shard tells the
    later batch its keys are busy, and that batch tries again, so every batch is written
    (none fails) and the shards agree on which went in last."""
    import threading

    store = four
    keys = [("race", f"k{i}") for i in range(8)]
    assert len({store.shard_of(b, k) for b, k in keys}) == 4
    busy = lambda: sum(s["txn_busy"] for s in store.stats()["shards"])  # noqa: E731
    before, errors = busy(), []

    def writer(tag: str) -> None:
        try:
            for n in range(25):
                store.put_many([lr.Put(b, k, b"%s%d" % (tag.encode(), n)) for b, k in keys])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(store.get_many(keys))) == 1  # one batch's values in every shard
    assert busy() > before  # they did meet


def test_batched_reads_see_cross_shard_batches_whole(four):
    """Readers batch-read the keys of cross-shard batches while a writer writes them: every
    answer holds one batch, never parts of two."""
    import threading

    keys = [("whole", f"k{i}") for i in range(24)]
    assert len({four.shard_of(b, k) for b, k in keys}) == 4
    four.put_many([lr.Put(b, k, b"0") for b, k in keys])
    rounds, seen, done = 60, [], threading.Event()

    def write():
        for v in range(1, rounds + 1):
            four.put_many([lr.Put(b, k, str(v).encode()) for b, k in keys])
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        for read in (four.get_many, lambda pairs: [h and h.size for h in four.head_many(pairs)]):
            got = read(keys)
            seen.append(got)
            assert len(set(got)) == 1, got  # one batch, whole
    writer.join()
    assert four.get_many(keys) == [str(rounds).encode()] * len(keys)
    assert len({tuple(s) for s in seen}) > 2  # the readers saw batches come and go


def _metric(port: int, name: str, labels: dict) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return sum(sample.value for family in text_string_to_metric_families(text.decode())
               for sample in family.samples
               if sample.name.removeprefix("ray_").removesuffix("_total") == name
               and all(sample.labels.get(k) == v for k, v in labels.items()))


def test_routing_survives_a_reopen_and_connect_and_metrics_name_each_shard(ray_cluster,
                                                                           tmp_url):
    name = f"sharded-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(metrics_interval_s=0.5), shards=2, route_by="bucket",
                    name=name)
    store.put_many([lr.Put(f"b{i}", "k", b"v") for i in range(20)])
    where = {f"b{i}": store.shard_of(f"b{i}", "k") for i in range(20)}
    assert {store.shard_of("b3", f"x{i}") for i in range(50)} == {where["b3"]}  # by bucket
    other = lr.connect(name)
    assert isinstance(other, lr.ShardedStore) and other.shards == 2
    assert other.get("b7", "k") == b"v"
    with pytest.raises(lr.InvalidArgumentError, match="already running"):
        lr.open(tmp_url, name=name)
    # Each shard's figures reach its node's Prometheus endpoint, tagged with its number.
    shard0 = store.stats()["shards"][0]
    (port,) = [n["MetricsExportPort"] for n in ray_cluster.nodes()
               if n["NodeID"] == shard0["process"]["node"]]
    wait_until(lambda: _metric(port, "leveled_puts", {"store": name, "shard": "0"})
               == shard0["changes"] > 0, timeout=60, interval=1.0)
    nodes = {shard["process"]["node"] for shard in store.stats()["shards"]}
    assert len(nodes) == 2  # two shards, two nodes
    store.close()
    with pytest.raises(lr.InvalidArgumentError, match="has 2 shards"):
        lr.open(tmp_url, shards=4)
    again = lr.open(tmp_url)  # the count is stored
    try:
        assert again.shards == 2 and again.shard_map.route_by == "bucket"
        assert {b: again.shard_of(b, "k") for b in where} == where
        assert again.get_many([(b, "k") for b in where]) == [b"v"] * 20
    finally:
        again.close()


def test_bad_shard_arguments_create_nothing(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    for kwargs in ({"shards": 3}, {"shards": 512}, {"shards": "2"}, {"route_by": "bucket"},
                   {"shards": 2, "route_by": "hash"},
                   {"shards": 2, "store": ObjectStore.from_url(url)}):
        with pytest.raises(lr.InvalidArgumentError):
            lr.open(url, **kwargs)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    lr.open(url).close()  # a plain store
    with pytest.raises(lr.InvalidArgumentError, match="plain store"):
        lr.open(url, shards=2)
    assert not (tmp_path / "db" / "shards").exists()


def test_a_dead_shard_fails_its_own_calls_only(ray_cluster, tmp_url):

    store = lr.open(tmp_url, shards=2)
    try:
        keys = {store.shard_of("b", f"k{i}"): f"k{i}" for i in range(10)}
        for key in keys.values():
            store.put("b", key, b"v")
        kill_actor(store.shard(1).actors()[0])
        assert store.get("b", keys[0]) == b"v"
        with pytest.raises(lr.StoreClosedError):
            store.get("b", keys[1])
        with pytest.raises(lr.StoreClosedError):
            store.get_many([("b", keys[0]), ("b", keys[1])])
    finally:
        store.close()  # shard 1 is gone already; this also frees the placement group


# -- same answers: a 4-shard store, a plain store and a dict --

MODEL_KEYS = st.sampled_from([f"k{i:02d}" for i in range(24)])
VALUES = st.binary(min_size=0, max_size=8)


def both(call):
    """``call(store)`` on both stores: each result, or the type of the error it raised."""
    out = []
    for store in Model.stores:
        try:
            out.append(call(store))
        except lr.LeveledError as exc:
            out.append(type(exc))
    return out


class Model(RuleBasedStateMachine):
    stores: tuple = ()

    def __init__(self):
        super().__init__()
        self.bucket = f"m{uuid.uuid4().hex[:8]}"  # each run starts from an empty bucket
        self.model: dict[str, tuple[bytes, int]] = {}  # key -> (value, index term)

    def _expect(self, results, value):
        assert results[0] == results[1] == value, results

    @rule(key=MODEL_KEYS, value=VALUES, term=st.integers(0, 5), if_absent=st.booleans())
    def put(self, key, value, term, if_absent):
        exists = key in self.model
        results = both(lambda s: s.put(self.bucket, key, value, if_absent=if_absent,
                                       indexes=self._index_change(key, term)) > 0)
        if if_absent and exists:
            self._expect(results, lr.ConditionFailedError)
            return
        self._expect(results, True)
        self.model[key] = (value, term)

    def _index_change(self, key, term):
        old = self.model.get(key)
        removes = [] if old is None or old[1] == term else [("remove", "t_int", old[1])]
        return removes + [("add", "t_int", term)]

    @rule(key=MODEL_KEYS)
    def delete(self, key):
        old = self.model.pop(key, None)
        indexes = [] if old is None else [("remove", "t_int", old[1])]
        self._expect(both(lambda s: s.delete(self.bucket, key, indexes=indexes) > 0), True)

    @rule(writes=st.dictionaries(MODEL_KEYS, st.one_of(st.none(), VALUES), min_size=1, max_size=8),
          fail_one=st.booleans())
    def put_many(self, writes, fail_one):
        items, after = [], dict(self.model)
        for key, value in writes.items():
            old = self.model.get(key)
            if value is None:
                indexes = [] if old is None else [("remove", "t_int", old[1])]
                items.append(lr.Delete(self.bucket, key, indexes=indexes))
                after.pop(key, None)
            else:
                items.append(lr.Put(self.bucket, key, value,
                                    indexes=self._index_change(key, 0)))
                after[key] = (value, 0)
        fails = fail_one and any(k in self.model for k in writes)
        if fails:  # a condition that cannot hold: nothing may be written, in any shard
            key = next(k for k in writes if k in self.model)  # first: it sees no other item
            items.insert(0, lr.Put(self.bucket, key, b"x", if_absent=True))
        results = both(lambda s: len(s.put_many(items)))
        self._expect(results, lr.ConditionFailedError if fails else len(items))
        if not fails:
            self.model = after

    @rule(keys=st.lists(MODEL_KEYS, max_size=10))
    def get_many(self, keys):
        self._expect(both(lambda s: s.get_many([(self.bucket, k) for k in keys])),
                     [self.model.get(k, (None,))[0] for k in keys])

    @rule(lo=st.integers(0, 5), width=st.integers(0, 5))
    def index_query(self, lo, width):
        expected = sorted((t, k) for k, (_, t) in self.model.items() if lo <= t <= lo + width)
        self._expect(both(lambda s: list(s.index_query(self.bucket, "t_int", lo, lo + width,
                                                       return_terms=True))), expected)

    @invariant()
    def folds_agree(self):
        expected = sorted((self.bucket, k, v) for k, (v, _) in self.model.items())
        self._expect(both(lambda s: list(s.fold_objects(self.bucket))), expected)
        self._expect(both(lambda s: [h.size for _, _, h in s.fold_heads(self.bucket)]),
                     [len(v) for _, _, v in expected])


def test_a_sharded_store_answers_as_a_plain_store_and_a_dict(four, tmp_path):
    plain = lr.open(f"file://{tmp_path}/plain")
    Model.stores = (four, plain)
    # No shrinking: each step costs calls to two stores, and a failure prints its steps.
    try:
        run_state_machine_as_test(Model, settings=settings(
            max_examples=3, stateful_step_count=10, deadline=None,
            phases=(Phase.explicit, Phase.reuse, Phase.generate)))
    finally:
        plain.close()


def test_bad_points_in_time_are_refused_and_leave_nothing_behind(four):
    """A sharded snapshot or reader given both ``at_sqn`` and ``at_time``, and a reader of a
    given checkpoint asked to move: InvalidArgumentError, with no snapshot or checkpoint left
    behind."""
    store = four
    store.put("pit", "k", b"v")
    before = {c.id for c in store.list_checkpoints()}
    snap = store.snapshot()
    position = snap.sqn
    snap.release()
    with pytest.raises(lr.InvalidArgumentError, match="at most one"):
        store.snapshot(at_sqn=position, at_time=time.time())
    with pytest.raises(lr.InvalidArgumentError, match="at most one"):
        lr.reader(store.url, at_sqn=position, at_time=time.time())
    pin = store.checkpoint(lifetime=60)
    reader = lr.reader(store.url, pin.id)
    try:
        with pytest.raises(lr.InvalidArgumentError, match="cannot move"):
            reader.refresh()
        assert reader.get("pit", "k") == b"v"  # still reading its checkpoint
    finally:
        reader.close()
    store.delete_checkpoint(pin.id)
    assert {c.id for c in store.list_checkpoints()} == before


def test_changes_of_a_sharded_store_equal_each_shards_log(four):
    """For random puts and deletes, the changes after random positions equal the model's log
    of each shard after its SQN; a position is JSON as it is."""
    import json
    import random

    rng = random.Random(11)
    bucket = f"ch-{uuid.uuid4().hex[:6]}"
    start = {str(s): shard["next_sqn"] - 1 for s, shard in enumerate(four.stats()["shards"])}
    log = {str(s): [] for s in range(4)}
    for i in range(120):
        key = f"k{rng.randrange(25)}"
        shard = str(four.shard_of(bucket, key))
        if rng.random() < 0.25:
            log[shard].append((bucket, key, four.delete(bucket, key), "delete", None))
        else:
            value = b"v%d" % i
            log[shard].append((bucket, key, four.put(bucket, key, value), "put", value))
    for _ in range(3):
        after = {s: rng.choice([start[s]] + [c[2] for c in log[s]]) for s in log}
        after = json.loads(json.dumps(after))  # as Spark keeps it
        got = [c for c in four.changes(after) if c.bucket == bucket]
        want = [(*c, int(s)) for s in sorted(log) for c in log[s] if c[2] > after[s]]
        assert [(c.bucket, c.key, c.sqn, c.kind, c.value, c.shard) for c in got] == want
    batch = next(four.changes_batches(start, batch_size=10_000))
    assert set(batch.column("shard").to_pylist()) <= {0, 1, 2, 3}
    with pytest.raises(lr.InvalidArgumentError):
        four.changes({"0": 1})  # a position names every shard
    with pytest.raises(lr.InvalidArgumentError):
        four.changes(5)


def test_listen_to_a_sharded_store_follows_every_shard(four):
    bucket = f"ls-{uuid.uuid4().hex[:6]}"
    position = {str(s): shard["next_sqn"] - 1 for s, shard in enumerate(four.stats()["shards"])}
    with four.listen(position) as feed:
        written = {(bucket, f"k{i}"): four.put(bucket, f"k{i}", b"x") for i in range(40)}
        seen = {}
        while len(seen) < len(written):
            for change in feed.poll(timeout=5):
                if change.bucket == bucket:
                    assert (change.bucket, change.key) not in seen
                    seen[(change.bucket, change.key)] = (change.shard, change.sqn)
        assert {k: sqn for k, (_, sqn) in seen.items()} == written
        assert all(four.shard_of(*k) == shard for k, (shard, _) in seen.items())
        assert all(feed.sqn[str(shard)] >= sqn for shard, sqn in seen.values())


def test_a_sharded_poll_waits_its_whole_timeout_for_a_change(four):
    """A poll that timed out leaves each shard's call waiting; the next poll waits for its
    own timeout, not for the first of those calls to come back empty."""
    import threading

    position = {str(s): shard["next_sqn"] - 1 for s, shard in enumerate(four.stats()["shards"])}
    with four.listen(position) as feed:
        assert feed.poll(timeout=0.2) == []
        late = threading.Timer(1.0, four.put, ("late", "k", b"x"))
        late.start()
        try:
            assert [(c.bucket, c.key) for c in feed.poll(timeout=30)] == [("late", "k")]
        finally:
            late.join()


def test_a_plain_bookie_refuses_the_root_of_a_sharded_store(ray_cluster, tmp_url, tmp_path):
    """Code that opens a URL as a plain store (as Ray-on-Spark's did) must not create a
    stray plain store at a sharded store's root."""
    from leveled_ray.client.bookies import BookieSpec, start_bookies

    lr.open(tmp_url, shards=2).close()
    with pytest.raises(lr.InvalidArgumentError, match="sharded"):
        start_bookies([BookieSpec(tmp_url)], lr.Options(), detached=False, head_only=None,
                      clock=time.time)
    assert not (tmp_path / "db" / "manifest").exists()
    store = lr.open(tmp_url)
    try:
        assert store.shards == 2
    finally:
        store.close()
