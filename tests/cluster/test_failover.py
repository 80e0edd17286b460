"""Failover (actors/failover.py): a Bookie whose process or node dies is restarted by Ray and
reopens its store by itself. Clients keep their handles; a call in flight raises
StoreUnavailableError (reads are sent again), later calls succeed, no acknowledged write is
lost, and other shards never stop serving."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import ray
from support.waits import wait_until

import leveled_ray as lr

pytestmark = pytest.mark.ray


def bookie_pid(store) -> int:
    return store.stats()["process"]["pid"]


def test_a_killed_bookie_comes_back_on_the_same_handle(ray_cluster, tmp_url):
    store = lr.open(tmp_url)
    try:
        acked = {f"k{i}": store.put("b", f"k{i}", b"v%d" % i) for i in range(50)}
        first = store.stats()
        epoch = first["epoch"]
        killed = time.time()
        os.kill(bookie_pid(store), signal.SIGKILL)
        # The next read is answered by the restarted Bookie (sent again if it was in flight).
        assert store.get("b", "k7") == b"v7"
        opened = store.stats()["opened"]  # the restarted Bookie's, made after the kill
        assert opened["created_at"] > killed > first["opened"]["created_at"]
        assert 0 <= opened["replay_s"] <= opened["open_s"] < 60
        assert opened["created_at"] <= opened["served_at"] <= time.time()
        assert store.get_many([("b", k) for k in acked]) == [b"v%d" % i for i in range(50)]
        assert store.put("b", "after", b"x") > max(acked.values())
        assert store.stats()["epoch"] == epoch + 1  # it claimed the store again
        assert store.head("b", "k3").sqn == acked["k3"]
    finally:
        store.close()
    with lr.reader(tmp_url) as r:  # closed cleanly after the failover: all there
        assert r.get("b", "after") == b"x" and r.get("b", "k49") == b"v49"


def test_a_restarted_bookie_stands_down_if_the_store_was_opened_meanwhile(ray_cluster,
                                                                          tmp_url):
    """A restarted Bookie claims the store only if its epoch is still the newest: here another
    writer opened the store while it was down, and the restarted one stands down, fenced,
    leaving the newer writer alone (manifest.transitions.reclaim_epoch)."""
    old = lr.open(tmp_url)
    try:
        old.put("b", "k", b"v1")
        pid = bookie_pid(old)
        new = lr.open(tmp_url)  # fences the first
        try:
            epoch = new.stats()["epoch"]
            with pytest.raises(lr.FencedError):
                old.put("b", "k", b"stale")
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(lr.FencedError):  # restarted, and stood down
                old.get("b", "k")
            assert new.put("b", "k", b"v2") and new.get("b", "k") == b"v2"
            assert new.stats()["epoch"] == epoch
        finally:
            new.close()
    finally:
        old.close()


def test_with_no_restarts_a_killed_bookie_stays_down(ray_cluster, tmp_url):
    store = lr.open(tmp_url, options=lr.Options(max_restarts=0))
    try:
        store.put("b", "k", b"v")
        os.kill(bookie_pid(store), signal.SIGKILL)
        with pytest.raises(lr.StoreClosedError) as raised:
            store.get("b", "k")
        assert not isinstance(raised.value, lr.StoreUnavailableError)
    finally:
        store.close()
    with lr.reader(tmp_url) as r:
        assert r.get("b", "k") == b"v"


def test_a_closed_bookie_whose_process_dies_is_not_reopened_and_answers_closed(ray_cluster,
                                                                              tmp_url):
    """A Bookie closed but not yet ended (a mover killed between the two) whose process then
    dies: Ray restarts the actor, which has no epoch to reclaim the store with. It answers
    every call with StoreClosedError (not "reopening"), instead of holding calls forever."""
    store = lr.open(tmp_url)
    try:
        store.put("b", "k", b"v")
        pid = bookie_pid(store)
        ray.get(store._actor.close.remote())  # the close a move makes before its driver died
        os.kill(pid, signal.SIGKILL)
        answer: list = []

        def call() -> None:
            try:
                answer.append(store.get("b", "k"))
            except lr.LeveledError as exc:
                answer.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(timeout=60)
        assert answer, "the call was held past a minute"
        assert isinstance(answer[0], lr.StoreClosedError), answer
        assert not isinstance(answer[0], lr.StoreUnavailableError)
    finally:
        store.close()
    with lr.reader(tmp_url) as r:
        assert r.get("b", "k") == b"v"


def test_a_shard_whose_node_dies_serves_again_and_the_others_never_stop(ray_cluster,
                                                                        spare_node, tmp_path):
    url = f"file://{tmp_path}/db"
    store = lr.open(url, shards=4)
    try:
        nodes = [s["process"]["node"] for s in store.stats()["shards"]]
        victims = [i for i, n in enumerate(nodes) if n == spare_node.node_id]
        assert victims, f"no shard was placed on the spare node: {nodes}"
        keys = {s: [] for s in range(4)}
        for i in range(400):
            key = f"k{i:04d}"
            keys[store.shard_of("b", key)].append(key)
        acked: dict[str, bytes] = {}
        failures: dict[int, list] = {s: [] for s in range(4)}
        stop = threading.Event()

        def write(shard: int) -> None:
            n = 0
            while not stop.is_set():
                key = keys[shard][n % len(keys[shard])]
                value = b"%d:%s" % (n, key.encode())
                try:
                    store.put("b", key, value)
                    acked[key] = value
                    acks[shard] += 1
                except lr.LeveledError as exc:
                    failures[shard].append((time.monotonic(), exc))
                    acked.pop(key, None)  # unknown now: not checked below
                n += 1

        others = [s for s in range(4) if s not in victims]
        acks: dict[int, int] = dict.fromkeys(range(4), 0)  # acknowledged puts, by shard
        threads = [threading.Thread(target=write, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: all(acks[s] >= 20 for s in range(4)))  # load before the death
        died = time.monotonic()
        spare_node.kill()
        # The victim shard serves again: a write to it is acknowledged.
        victim = victims[0]

        def probed() -> bool:
            try:
                # Answered from another node: a local cluster's killed node may run its
                # processes on a moment, until Ray finds it dead.
                if store.shard(victim).stats()["process"]["node"] == spare_node.node_id:
                    return False
                store.put("b", keys[victim][0], b"probe")
                return True
            except lr.StoreUnavailableError:
                return False

        wait_until(probed, timeout=60)
        acked[keys[victim][0]] = b"probe"
        served = time.monotonic() - died
        after = dict(acks)
        wait_until(lambda: all(acks[s] >= after[s] + 20 for s in others))  # load after it
        stop.set()
        for t in threads:
            t.join()
        assert served < 30, served
        assert not any(failures[s] for s in range(4) if s not in victims), failures
        for s in victims:  # only calls in flight at the death failed, and only as unknown
            assert all(isinstance(e, lr.StoreUnavailableError) for _, e in failures[s])
        got = store.get_many([("b", k) for k in sorted(acked)])
        assert got == [acked[k] for k in sorted(acked)]
        after = [s["process"]["node"] for s in store.stats()["shards"]]
        assert spare_node.node_id not in after
        assert after[victim] != nodes[victim]
    finally:
        store.close()
