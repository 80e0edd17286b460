"""The node's disk cache through the public API: a store reopened on the node, or restarted
there by Ray after its Bookie was killed, reads what the last one fetched from local disk, and
damage done to the cache's files while it is read
(flipped bytes, truncation, deletion, a corrupt index) is never seen: every read is right,
and none fails."""

from __future__ import annotations

import os
import random
import signal
import threading

import pytest
from support.waits import wait_until

import leveled_ray as lr

pytestmark = pytest.mark.ray

KEYS = [("b", f"k{i:05d}") for i in range(2000)]
VALUES = [random.Random(i).randbytes(600) for i in range(len(KEYS))]


def options(path) -> lr.Options:
    # small files: the values are read from journal files and the keys from SSTs, not memory
    return lr.Options(disk_cache={"path": str(path), "local_stores": True},
                      ledger={"l0_max_keys": 1000, "push_keys": 500})


def disk(store) -> dict:
    return store.stats()["disk_cache"]


def test_a_reopened_store_reads_warm_from_the_node_disk(ray_cluster, tmp_url, tmp_path):
    opts = options(tmp_path / "cache")
    with lr.open(tmp_url, opts) as store:
        store.put_many([lr.Put(b, k, v) for (b, k), v in zip(KEYS, VALUES)])
    with lr.open(tmp_url, opts) as store:  # cold: read from the store, kept on disk
        assert store.get_many(KEYS) == VALUES
        cold = disk(store)
        assert cold["hits"] == 0 and cold["misses"] > 0
        wait_until(lambda: disk(store)["puts"] >= cold["misses"])
    with lr.open(tmp_url, opts) as store:  # a new Bookie process: warm from the node's disk
        assert store.get_many(KEYS) == VALUES
        warm = disk(store)
        assert warm["misses"] == 0 and warm["hits"] == cold["misses"]
        os.kill(store.stats()["process"]["pid"], signal.SIGKILL)  # Ray restarts it (failover)
        assert store.get_many(KEYS) == VALUES
        # Nothing from the store: a read sent again while Ray restarted the Bookie may run
        # twice there, each reading the disk, so the hits are at least as many as before.
        assert disk(store)["misses"] == 0 and disk(store)["hits"] >= cold["misses"]


def damage(path, stop: threading.Event, rng: random.Random, done: list) -> None:
    """Flip, truncate and delete the cache's files, its index too, until ``stop``."""
    while not stop.is_set():
        files = [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]
        index = [f for f in files if os.path.basename(f).startswith("cache.db")]
        values = [f for f in files if f.endswith(".val")]
        if not (index and values):
            stop.wait(0.01)
            continue
        name = rng.choice(index if rng.random() < 0.05 else values)
        how = rng.choice(["flip", "truncate", "delete"])
        try:
            if how == "flip" and os.path.getsize(name):
                with open(name, "r+b") as f:
                    f.seek(rng.randrange(os.path.getsize(name)))
                    f.write(os.urandom(64))
            elif how == "truncate":
                os.truncate(name, rng.randrange(os.path.getsize(name) + 1))
            else:
                os.remove(name)
        except OSError:
            continue  # gone already
        done.append((how, os.path.basename(name)))
        stop.wait(0.01)


def test_damage_to_the_cache_under_load_is_never_seen(ray_cluster, tmp_url, tmp_path):
    path = tmp_path / "cache"
    opts = options(path)
    with lr.open(tmp_url, opts) as store:
        store.put_many([lr.Put(b, k, v) for (b, k), v in zip(KEYS, VALUES)])
    stop, done = threading.Event(), []
    rng = random.Random(7)
    damager = threading.Thread(target=damage, args=(path, stop, rng, done))
    try:
        for round_ in range(3):
            with lr.open(tmp_url, opts) as store:
                if round_ == 1:
                    damager.start()  # round 0 filled the cache
                for _ in range(3):
                    picked = rng.sample(range(len(KEYS)), 500)
                    assert store.get_many([KEYS[i] for i in picked]) == [VALUES[i] for i in picked]
                for i in rng.sample(range(len(KEYS)), 50):
                    assert store.get(*KEYS[i]) == VALUES[i]
    finally:
        stop.set()
        damager.join()
    assert {how for how, _ in done} == {"flip", "truncate", "delete"}
    assert any(name.startswith("cache.db") for _, name in done)
    # What the damage under load met depends on timing; this damage is always met: every
    # value file flipped, then everything read again
    with lr.open(tmp_url, opts) as store:
        assert store.get_many(KEYS) == VALUES  # the cache holds every block again
        wait_until(lambda: disk(store)["puts"] + disk(store).get("dropped", 0)
                   >= disk(store)["misses"])
    for name in [os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                 if f.endswith(".val")]:
        with open(name, "r+b") as f:
            f.seek(os.path.getsize(name) // 2)
            f.write(os.urandom(16))
    with lr.open(tmp_url, opts) as store:
        assert store.get_many(KEYS) == VALUES
        assert disk(store)["bad"] > 0  # met, as misses


def test_a_reopened_store_starts_warm_from_what_its_last_bookie_held(ray_cluster, tmp_url,
                                                                    tmp_path):
    """An open loads, from the node's disk cache, the blocks and values that the store's last
    Bookie on the node held in memory (its hot list, saved at its close): the first reads
    after it ask neither the disk cache nor the object store. A damaged hot list is a cold
    start, and every read is right."""
    import diskcache

    # The open waits for all of its warm start; L0 memory is persisted (and merged) at once.
    opts = options(tmp_path / "cache").replace(disk_cache={"warm_s": 60},
                                               ledger={"l0_max_age_s": 0.2})
    picked, wanted = KEYS[::3], VALUES[::3]
    with lr.open(tmp_url, opts) as store:
        store.put_many([lr.Put(b, k, v) for (b, k), v in zip(KEYS, VALUES)])
        # Merged before the close: no merge replaces the files the next Bookie reads.
        wait_until(lambda: (p := store.stats()["penciller"])["ledger_sqn"] >= len(KEYS)
                   and not p["merging"] and not p["l0_files"] and not p["l0_memory_keys"])
    with lr.open(tmp_url, opts) as store:
        assert store.get_many(picked) == wanted  # what this Bookie holds in memory
    with lr.open(tmp_url, opts) as store:
        opened = disk(store)
        assert opened["warmed"] > 0 and opened["warmed_values"] == len(picked)
        assert store.stats()["opened"]["warmed"] == opened["warmed"]
        assert store.get_many(picked) == wanted
        read = disk(store)
        assert (read["hits"], read["misses"]) == (opened["hits"], opened["misses"])
    with diskcache.Cache(str(tmp_path / "cache")) as cache:  # every hot list damaged
        notes = [key for key in cache.iterkeys() if key.endswith("/hot-list")]
        assert notes
        for key in notes:
            cache.set(key, b"\x00" * 8 + b"not a hot list")
    with lr.open(tmp_url, opts) as store:
        assert disk(store).get("warmed", 0) == 0 and disk(store)["bad"] >= 1
        assert store.get_many(picked) == wanted
