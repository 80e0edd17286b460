"""Splitting and moving shards of a running store (see leveled_ray.cluster.reshape): writes
to the shard pause and go on, every handle follows the new layout (copies made before it
included, see leveled_ray.cluster.redirect), and every read agrees with a model."""

import concurrent.futures
import contextlib
import pickle
import random
import threading
import time
import uuid

import pyarrow as pa
import pytest
from support.model import check_model, write_rounds
from support.s3 import QUICK_FAILURES, S3_BUCKET, s3_options
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.bulk import sharded as bulk
from leveled_ray.clock import ManualClock
from leveled_ray.cluster import placement
from leveled_ray.cluster.redirect import CHANGE_WAIT_S, RESHAPING, followed
from leveled_ray.cluster.txn import COMMITTED
from leveled_ray.files.store import ObjectStore
from leveled_ray.testing.fault_proxy import FaultProxy

pytestmark = pytest.mark.ray

OPTIONS = lr.Options(**SMALL)


class Writer(threading.Thread):
    """Puts through one handle until stopped or refused, each mirrored in the model once
    acknowledged; the longest put is the pause it saw. Writers of one model take disjoint
    keys (``first``, every ``step``-th)."""

    def __init__(self, store, model: dict, first: int = 0, step: int = 1):
        super().__init__(daemon=True)
        self.store, self.model = store, model
        self.keys = [f"k{i:04d}" for i in range(first, 300, step)]
        self.stop = threading.Event()
        self.longest = 0.0
        self.puts = 0
        self.error: Exception | None = None

    def run(self):
        try:
            while not self.stop.is_set():
                key = self.keys[self.puts % len(self.keys)]
                value = b"w%d" % self.puts
                began = time.monotonic()
                self.store.put("b", key, value, indexes=[("add", "n_int", int(key[1:]) % 7)])
                self.longest = max(self.longest, time.monotonic() - began)
                self.model[key] = value
                self.puts += 1
        except Exception as exc:  # noqa: BLE001 - reported by wait_for and stopped
            self.error = exc

    def wait_for(self, puts: int, timeout: float = 120.0) -> None:
        with contextlib.suppress(AssertionError):  # the assertions below say what is wrong
            wait_until(lambda: self.puts >= puts or self.error is not None, timeout,
                       interval=0.01)
        assert self.error is None, self.error
        assert self.puts >= puts


def drain(feed, once: bool = False) -> list:
    """The changes the listener hands out until it has none for a second (``once``: in one
    poll), as ``(key, sqn, kind, value)``."""
    seen = []
    while batch := feed.poll(timeout=1.0):
        seen += [(c.key, c.sqn, c.kind, c.value) for c in batch]
        if once:
            break
    return seen


def latest(seen: list) -> dict:
    """Each key's value after the changes in the order handed out (a key's changes are in one
    shard's order: its SQNs go on in the children of a split)."""
    out: dict = {}
    for key, _, kind, value in seen:
        if kind == "put":
            out[key] = value
        else:
            out.pop(key, None)
    return out


def stopped(*writers: Writer) -> None:
    for writer in writers:
        writer.stop.set()
        writer.join()
        assert writer.error is None, writer.error


def test_a_running_store_splits_under_writes_and_a_copy_made_before_follows(ray_cluster,
                                                                            tmp_path):
    store = lr.open(f"file://{tmp_path}/db", OPTIONS, shards=2, name="reshape-split")
    try:
        model: dict = {}
        write_rounds(store, model, 5, random.Random(3))
        copy = pickle.loads(pickle.dumps(store))  # as a Ray task holds it
        early = pickle.loads(pickle.dumps(store))  # another, in use through the split
        feed = store.listen(0)  # follows the split too, from its position
        seen = drain(feed)
        writers = [Writer(store, model, 0, 2), Writer(early, model, 1, 2)]
        for writer in writers:
            writer.start()
            writer.wait_for(20)
        seen += drain(feed, once=True)
        shard_map = store.split_shard(0)
        for writer in writers:  # writes go on after it, through both handles
            writer.wait_for(writer.puts + 20)
        stopped(*writers)
        seen += drain(feed)
        feed.close()
        assert set(feed.sqn) == {"0.0", "0.1", "1"}
        assert len(seen) == len(set(seen)), "a change handed out twice"
        assert latest(seen) == model
        assert shard_map.labels == ("0.0", "0.1", "1") and store.shards == 3
        # Writes paused, none failed, and the pause is short; the other handle waited for
        # the new layout (the shard's mark) and followed it.
        assert max(w.longest for w in writers) < 60, [w.longest for w in writers]
        assert early.shards == 3
        check_model(store, model)
        # A copy that was idle still holds the old layout: its calls are redirected.
        assert copy.shards == 2
        keys = sorted(model)[:50]
        assert [copy.get("b", k) for k in keys] == [model[k] for k in keys]
        assert copy.shards == 3
        write_rounds(copy, model, 2, random.Random(4))  # cross-shard put_many, new layout
        check_model(copy, model)
        check_model(store, model)
    finally:
        store.close()
    reopened = lr.open(f"file://{tmp_path}/db", OPTIONS)
    try:
        assert reopened.shard_map.labels == ("0.0", "0.1", "1")
        check_model(reopened, model)
    finally:
        reopened.close()


def nodes_of(store) -> list[str]:
    return [s["process"]["node"] for s in store.stats()["shards"]]


def test_a_shard_moves_to_another_node_and_rebalance_spreads_them(ray_cluster, tmp_path):
    store = lr.open(f"file://{tmp_path}/db", OPTIONS, shards=2, name="reshape-move")
    try:
        model: dict = {}
        write_rounds(store, model, 3, random.Random(5))
        copy = pickle.loads(pickle.dumps(store))
        alive = placement.alive_nodes()
        assert len(alive) == 3
        with pytest.raises(lr.InvalidArgumentError):
            store.move_shard(0, "f" * 56)
        with pytest.raises(lr.InvalidArgumentError):
            store.move_shard(2, alive[0])
        assert copy.get("b", sorted(model)[0]) == model[sorted(model)[0]]
        # Both shards onto one node, under writes through the copy, then spread again.
        crowded = nodes_of(store)[0]
        feed = store.listen(0)
        writer = Writer(copy, model)
        writer.start()
        writer.wait_for(10)
        seen = drain(feed, once=True)
        store.move_shard(1, crowded)
        writer.wait_for(writer.puts + 10)
        stopped(writer)
        assert nodes_of(store) == [crowded, crowded]
        seen += drain(feed)  # the listener followed the move
        feed.close()
        assert len(seen) == len(set(seen)) and latest(seen) == model
        write_rounds(copy, model, 2, random.Random(6))  # the copy follows the move
        check_model(store, model)
        moves = store.rebalance()
        assert len(moves) == 1 and moves[0]["from"] == crowded
        after = nodes_of(store)
        assert len(set(after)) == 2 and after.count(crowded) == 1
        assert store.rebalance() == []  # balanced: nothing moves
        check_model(copy, model)
        # A moved Bookie's process started before the close, under a name of its own; a
        # handle made from the store's name finds it through the shard's name.
        assert any("~" in s["name"] for s in store.stats()["shards"])
        check_model(lr.connect("reshape-move"), model)
    finally:
        store.close()
    again = lr.open(f"file://{tmp_path}/db", OPTIONS, name="reshape-move")  # the names free
    try:
        assert nodes_of(lr.connect("reshape-move")) == nodes_of(again)
        check_model(again, model)
    finally:
        again.close()


def test_a_listener_behind_a_split_reaches_the_end_though_the_last_changes_are_its_siblings(
        ray_cluster, tmp_path):
    """A child's inherited journal holds its sibling's changes too: a listener behind the
    split reads past them, though none of them is its own, and waits for new changes."""
    store = lr.open(f"file://{tmp_path}/db", OPTIONS, shards=1, name="reshape-behind")
    try:
        feed = store.listen(0)
        model: dict = {}
        for i in range(40):  # one change per SQN, so the last ones fall to one child
            store.put("b", f"k{i:03d}", b"v%d" % i)
            model[f"k{i:03d}"] = b"v%d" % i
        store.split_shard(0)
        done = threading.Event()
        seen: list = []
        reader = threading.Thread(target=lambda: (seen.extend(drain(feed)), done.set()),
                                  daemon=True)
        reader.start()
        assert done.wait(60), "the listener did not come back from a poll"
        assert latest(seen) == model and len(seen) == 40
        store.put("b", "k999", b"new")
        assert [c.key for c in feed.poll(timeout=30)] == ["k999"]
        feed.close()
    finally:
        store.close()


def test_history_leases_pass_to_both_children_of_a_split(ray_cluster, tmp_path):
    """A consumer's lease on a shard holds its history in both children: a split does not
    let their journal compaction drop what the consumer has not read."""
    store = lr.open(f"file://{tmp_path}/db", OPTIONS, shards=1, name="reshape-leases")
    try:
        for i in range(10):
            store.put("b", f"k{i:03d}", b"v")
        feed = store.listen(0, name="consumer", lifetime=600)
        assert len(feed.poll(timeout=30)) > 0
        store.set_history_lease("held", {"0": 3}, 600)
        store.split_shard(0)
        leases = store.list_history_leases()
        assert leases["held"] == {"0.0": 3, "0.1": 3}
        assert set(leases["consumer"]) == {"0.0", "0.1"}
        feed.close()
    finally:
        store.close()


def test_a_split_that_fails_before_its_commit_point_reopens_the_shard_where_it_ran(
        ray_cluster, moto_endpoint):
    """Every write of the first child's manifest answers 503 (moto's S3 behind the fault
    proxy): the split fails at its children, before its commit point. The shard is opened
    again on its node, the error raised, and the store holds all it held and takes writes."""
    url = f"s3://{S3_BUCKET}/split-fails-{uuid.uuid4().hex[:10]}"
    with FaultProxy(moto_endpoint) as proxy:
        options = s3_options(proxy.endpoint, **SMALL, **QUICK_FAILURES)
        store = lr.open(url, options, shards=2, name="reshape-fails")
        try:
            model: dict = {}
            write_rounds(store, model, 3, random.Random(8))
            nodes = nodes_of(store)
            proxy.fail_paths("PUT", "/shard-000.0-e", 10**6)
            with pytest.raises(lr.ObjectStoreError, match="503"):
                store.split_shard(0)
            proxy.clear_paths()
            assert store.shard_map.labels == ("0", "1") and nodes_of(store) == nodes
            check_model(store, model)
            write_rounds(store, model, 2, random.Random(9))
            check_model(store, model)
        finally:
            store.close()
        with lr.reader(url, options=options) as at_rest:  # the old layout, whole
            assert at_rest.shard_map.labels == ("0", "1")
            check_model(at_rest, model)


def test_a_copy_waits_for_a_new_layout_while_the_shards_mark_is_recent_and_not_after_two_minutes(
        ray_cluster, tmp_path):
    """A copy's call meets a closed shard. Marked (``reshaping/<prefix>``) less than two
    minutes ago by the store's clock, the call waits for the new layout and follows it; marked
    longer ago (its splitter died), it fails at once with the closed shard's error. Whole-store
    calls through an idle copy of the old layout fail too; ``lr.connect`` has the new one."""
    clock = ManualClock()
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS, shards=2, name="reshape-mark", clock=clock)
    reopened = None
    try:
        model: dict = {}
        write_rounds(store, model, 2, random.Random(10))
        key = next(k for k in sorted(model) if store.shard_of("b", k) == 0)
        copy, idle = (pickle.loads(pickle.dumps(store)) for _ in range(2))
        root, mark = ObjectStore.from_url(url), RESHAPING + store.shard_map.prefixes[0]
        root.put(mark, repr(clock()).encode())
        clock.advance(CHANGE_WAIT_S + 1)  # the splitter that marked it died two minutes ago
        store.shard(0).close()
        with pytest.raises(lr.StoreClosedError):
            in_thread(copy.get, "b", key).result(timeout=30)  # not CHANGE_WAIT_S
        root.put(mark, repr(clock()).encode())  # a splitter at work now
        waiting = in_thread(copy.get, "b", key)
        store.close()
        lr.admin(url, OPTIONS).split_shard(0)  # the new layout: the shard's children
        reopened = lr.open(url, OPTIONS, name="reshape-mark", clock=clock)
        assert waiting.result(timeout=60) == model[key]
        assert copy.shards == 3 and copy.shard_map.labels == reopened.shard_map.labels
        root.delete(mark)
        with pytest.raises(lr.StoreClosedError):
            idle.stats()
        assert lr.connect("reshape-mark").shards == 3
        check_model(copy, model)
    finally:
        store.close()
        if reopened is not None:
            reopened.close()


def in_thread(call, *args) -> concurrent.futures.Future:
    """``call(*args)`` in a daemon thread of its own (one that hangs does not hold the
    session's exit); its outcome."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run():
        try:
            done.set_result(call(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller's to see
            done.set_exception(exc)
    threading.Thread(target=run, daemon=True).start()
    return done


def test_a_copy_of_a_store_without_a_name_gets_the_error_after_a_split(ray_cluster, tmp_path):
    """Bookies are found by name: only the handle that split an unnamed store follows it."""
    store = lr.open(f"file://{tmp_path}/db", OPTIONS, shards=2)
    try:
        model: dict = {}
        write_rounds(store, model, 2, random.Random(11))
        key = next(k for k in sorted(model) if store.shard_of("b", k) == 0)
        copy = pickle.loads(pickle.dumps(store))
        store.split_shard(0)
        with pytest.raises(lr.StoreClosedError):
            copy.get("b", key)
        assert copy.shards == 2
        check_model(store, model)
    finally:
        store.close()


def test_only_a_call_that_changed_nothing_is_sent_again_on_a_new_layout():
    """What a stale handle sends again: a call refused by a closed Bookie or by a shard that
    does not own the key; never one whose outcome is unknown, nor one a committed cross-shard
    batch made."""
    assert followed(lr.StoreClosedError("closed")) and followed(lr.WrongShardError("moved"))
    assert not followed(lr.StoreUnavailableError("lost during the call"))
    committed = lr.StoreClosedError("closed before it applied its part")
    setattr(committed, COMMITTED, True)
    assert not followed(committed)


def test_a_bulk_write_through_the_stores_name_finds_a_moved_bookie(ray_cluster, tmp_path):
    """A moved shard's Bookie runs under a name of its own: a bulk write that begins and
    commits through the store's name finds it through the shard's."""
    url = f"file://{tmp_path}/db"
    store = lr.open(url, OPTIONS, shards=2, name="reshape-bulk")
    try:
        nodes = nodes_of(store)
        store.move_shard(1, next(n for n in placement.alive_nodes() if n != nodes[1]))
        assert "~" in store.stats()["shards"][1]["name"]
        keys = [f"k{i:04d}" for i in range(200)]
        rows = pa.record_batch({"bucket": ["bulk"] * len(keys), "key": keys,
                                "value": [k.encode() for k in keys]})
        plan = bulk.begin_write(url, OPTIONS, store_name="reshape-bulk")
        assert bulk.commit(plan, [bulk.write_partition(plan, 0, [rows])]) == len(keys)
        assert {store.shard_of("bulk", k) for k in keys} == {0, 1}
        assert store.get_many([("bulk", k) for k in keys]) == [k.encode() for k in keys]
        store.put("bulk", keys[0], b"after")  # the moved Bookie takes writes after it
        assert store.get("bulk", keys[0]) == b"after"
    finally:
        store.close()
