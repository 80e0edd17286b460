"""Splitting and moving shards of a running store (see leveled_ray.cluster.reshape): writes
to the shard pause and go on, every handle follows the new layout (copies made before it
included, see leveled_ray.cluster.redirect), and every read agrees with a model."""

import pickle
import random
import threading
import time

import pytest
from support.model import check_model, write_rounds
from support.stores import SMALL

import leveled_ray as lr
from leveled_ray.cluster import placement

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
        deadline = time.monotonic() + timeout
        while self.puts < puts and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
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
