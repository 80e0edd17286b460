"""Elastic shards: failover, in one run, on a local multi-node Ray cluster and file://.

Measures (a 4-shard store, ``--keys`` objects of 1 KiB per shard):

- **a plain open taking a spare Bookie** (``lr.keep_spare_bookies``; the spare's process
  started ahead) against the plain open (median of 3 each);
- **node death**: from the death of a worker node (``remove_node`` without grace) to the
  first acknowledged write on a shard that ran there, against a plain open of that shard's
  URL (median of 3, same run), idle and under the same writers as the failover (an open of a
  copy of the shard's files, made while the store was closed). It includes the time Ray
  takes to find the node dead: its health checks, set here to a 0.5 s period and 3 failures
  (``HEALTH``; Ray's defaults are 3 s and 5, which adds about 13 s). Printed with it: when
  the restarted Bookie's process began, its Bookie was made and its store was open again
  (after the death), and how long its open took;
- **process death**: from a SIGKILL of a shard's Bookie to the first answered read on the
  same handle, against the same plain open;
- **the other shards' puts** during the node failover (from the death to the victim shard
  serving again), against the same writers just before the death;
- **split**: ``lr.admin(url).split_shard(0)`` of the closed store: the bytes it wrote (the
  children's objects) against the shard's bytes, its time, and the first open of the split
  store, against the same plain open;
- **split and move through the running store**: ``store.split_shard(i)`` and
  ``store.move_shard(j, node)`` under writes to both shards: the longest pause of each
  shard's writes (none fails), against the same plain open, and the other shard's puts
  during the split against before it.

Prints each figure with its ratio and writes ``docs/img/elastic.png``.
Run: ``python bench/elastic.py`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time

import ray
from ray.cluster_utils import Cluster

import leveled_ray as lr
from leveled_ray.cluster.placement import alive_nodes

import plots


def value_of(key: str) -> bytes:
    """A key's 1 KiB value: incompressible (the split's ratio is against real bytes) and
    the same each time it is asked for."""
    return hashlib.shake_128(key.encode()).digest(1024)


HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}


def keys_of(store, shard: int, count: int) -> list[str]:
    out, i = [], 0
    while len(out) < count:
        if store.shard_of("b", f"k{i}") == shard:
            out.append(f"k{i}")
        i += 1
    return out


def plain_open_s(url: str) -> float:
    """Median time of three plain opens of ``url`` (each closed at once)."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        store = lr.open(url)
        times.append(time.perf_counter() - t)
        store.close()
    return statistics.median(times)


def spare_open_s(url: str) -> float:
    """Median time of three plain opens of ``url`` that each take a spare Bookie started
    ahead (``lr.keep_spare_bookies``); the spares stop after."""
    lr.keep_spare_bookies(1)
    times = []
    try:
        for _ in range(3):
            deadline = time.monotonic() + 60
            while lr.spare_stats()["waiting"] < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # the spare's process has started and imported the package
            t = time.perf_counter()
            store = lr.open(url)
            times.append(time.perf_counter() - t)
            store.close()
        assert lr.spare_stats()["taken"] == 3
    finally:
        lr.keep_spare_bookies(0)
    return statistics.median(times)


class Writers:
    """One thread per shard, each putting to its own shard's keys in turn; every ack is
    timed."""

    def __init__(self, store, keys: dict[int, list[str]]):
        self.acks: dict[int, list[float]] = {s: [] for s in keys}
        self.errors: dict[int, list[str]] = {s: [] for s in keys}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(store, s, k))
                         for s, k in keys.items()]
        for t in self._threads:
            t.start()

    def _write(self, store, shard: int, keys: list[str]) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                key = keys[n % len(keys)]
                store.put("b", key, value_of(key))
                self.acks[shard].append(time.perf_counter())
            except lr.LeveledError as exc:
                self.errors[shard].append(type(exc).__name__)
            n += 1

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def rate(self, shards, start: float, end: float) -> float:
        """Acks per second of ``shards`` between ``start`` and ``end``."""
        n = sum(1 for s in shards for t in self.acks[s] if start <= t < end)
        return n / (end - start)


def process_began_s(pid: int, since_boot: float) -> float:
    """When process ``pid`` (on this machine: the cluster is local) began, in seconds after
    ``since_boot`` (``CLOCK_BOOTTIME``, as ``/proc`` counts)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK") - since_boot


def serve_again(call, since: float, limit_s: float = 120.0) -> float:
    """Seconds from ``since`` until ``call()`` succeeds."""
    while time.perf_counter() - since < limit_s:
        try:
            call()
            return time.perf_counter() - since
        except lr.StoreClosedError:
            pass
    raise TimeoutError(f"not serving after {limit_s} s")


def moved_and_writes(store, shard: int, dead_node: str, key: str) -> None:
    """A write to ``shard``, acknowledged by its Bookie on another node than ``dead_node``
    (a local cluster's removed node may run on a moment before it is found dead)."""
    node = store.shard(shard).stats()["process"]["node"]
    if node == dead_node:
        time.sleep(0.05)
        raise lr.StoreUnavailableError(f"shard {shard} still answers from the dead node")
    store.put("b", key, value_of(key))


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path)
               for n in names)


def split_rows(url: str, root: str, plain: float) -> list[tuple[str, float, float, str]]:
    """Split shard 0 of the closed store at ``url`` (under directory ``root``), and open it."""
    admin = lr.admin(url)
    shard_bytes = directory_bytes(os.path.join(root, "db", admin.shard_map.prefixes[0]))
    deadline = time.monotonic() + 60  # a killed Bookie's snapshot lease goes stale first
    while True:
        t = time.perf_counter()
        try:
            split = admin.split_shard(0)
            break
        except lr.InvalidArgumentError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    split_s = time.perf_counter() - t
    copied = sum(directory_bytes(os.path.join(root, "db", p)) for p in split.prefixes[:2])
    t = time.perf_counter()
    store = lr.open(url)
    open_s = time.perf_counter() - t
    try:
        assert store.shards == 5 and store.get("b", "k0") == value_of("k0")
    finally:
        store.close()
    print(f"split of shard 0: {copied} bytes written, shard {shard_bytes} bytes")
    return [("split: bytes written / shard bytes", copied, shard_bytes, "bytes"),
            ("split (store closed) / plain open", split_s, plain, "s"),
            ("open of the split store (5 shards) / plain open (1)", open_s, plain, "s")]


def longest_gap(acks: list[float], start: float, end: float) -> float:
    """The longest time between two acks (or ``start``/``end``) around ``[start, end]``."""
    times = [start] + [t for t in acks if start <= t <= end] + [end]
    return max(b - a for a, b in zip(times, times[1:]))


def running_rows(url: str, plain: float) -> list[tuple[str, float, float, str]]:
    """Split a shard through the running store, then move one, under writes to it and to
    another shard: the longest pause of its writes, and the other shard's puts."""
    store = lr.open(url)
    try:
        shard, other = store.shards - 1, 0
        writers = Writers(store, {shard: keys_of(store, shard, 200),
                                  other: keys_of(store, other, 200)})
        time.sleep(2.0)
        began = time.perf_counter()
        store.split_shard(shard)
        split_s = time.perf_counter() - began
        time.sleep(2.0)
        node = store.stats()["shards"][other]["process"]["node"]
        target = next(n for n in alive_nodes() if n != node)
        moved = time.perf_counter()
        store.move_shard(other, target)
        move_s = time.perf_counter() - moved
        time.sleep(2.0)
        writers.stop()
        assert not any(writers.errors.values()), writers.errors
        assert store.shard(other).stats()["process"]["node"] == target
        split_pause = longest_gap(writers.acks[shard], began, began + split_s + 1.0)
        move_pause = longest_gap(writers.acks[other], moved, moved + move_s + 1.0)
        during = writers.rate([other], began, began + split_s)
        before = writers.rate([other], began - 1.5, began)
    finally:
        store.close()
    print(f"split through the running store: {split_s:.2f} s; move: {move_s:.2f} s")
    return [("running split: longest write pause of the shard / plain open", split_pause,
             plain, "s"),
            ("running split: other shard's puts, during / before", during, before, "puts/s"),
            ("move: longest write pause of the shard / plain open", move_pause, plain, "s")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=20_000, help="objects per shard")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.keys = 2000
    tmp = tempfile.mkdtemp(prefix="lr-elastic-")
    os.environ["RAY_TMPDIR"] = tmp
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": dict(HEALTH)})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    url = f"file://{tmp}/db"
    store = lr.open(url, shards=4)
    keys = {s: keys_of(store, s, args.keys) for s in range(4)}
    for s, ks in keys.items():
        for i in range(0, len(ks), 1000):
            store.put_many([lr.Put("b", k, value_of(k)) for k in ks[i:i + 1000]])
    store.close()
    for prefix in store.shard_map.prefixes:  # the peer of a plain open under load
        shutil.copytree(os.path.join(tmp, "db", prefix), os.path.join(tmp, "copy", prefix))
    plain = plain_open_s(store.shard_map.shard_url(url, 0))
    rows: list[tuple[str, float, float, str]] = []  # measure, value, peer value, unit
    rows.append(("plain open taking a spare Bookie / plain open",
                 spare_open_s(store.shard_map.shard_url(url, 0)), plain, "s"))

    store = lr.open(url, shards=4)
    try:
        nodes = [s["process"]["node"] for s in store.stats()["shards"]]
        victim_node = next(w for w in workers if w.node_id in nodes)
        victims = [s for s, n in enumerate(nodes) if n == victim_node.node_id]
        others = [s for s in range(4) if s not in victims]
        writers = Writers(store, {s: keys[s][:200] for s in others})
        time.sleep(3.0)
        loaded = plain_open_s(f"file://{tmp}/copy/{store.shard_map.prefixes[victims[0]]}")
        time.sleep(3.0)  # the puts "before" are measured over the last 2.5 s: none of it opens
        died, died_boot = time.perf_counter(), time.clock_gettime(time.CLOCK_BOOTTIME)
        died_wall = time.time()
        cluster.remove_node(victim_node, allow_graceful=False)
        node_s = serve_again(lambda: moved_and_writes(store, victims[0], victim_node.node_id,
                                                      keys[victims[0]][0]), died)
        served = time.perf_counter()
        writers.stop()
        restarted = store.shard(victims[0]).stats()
        began = process_began_s(restarted["process"]["pid"], died_boot)
        made = restarted["opened"]["created_at"] - died_wall
        opened = restarted["opened"]["served_at"] - died_wall
        before = writers.rate(others, died - 2.5, died)
        during = writers.rate(others, died, served)
        assert not any(writers.errors.values()), writers.errors
        print(f"node failover: {node_s:.2f} s; the new Bookie's process began at {began:.2f} s,"
              f" its Bookie was made at {made:.2f} s and opened its store in "
              f"{restarted['opened']['open_s']:.2f} s (by {opened:.2f} s); plain open "
              f"{plain:.2f} s idle, "
              f"{loaded:.2f} s under the writers")
        rows.append(("failover, node death / plain open", node_s, plain, "s"))
        rows.append(("failover, node death / plain open under the same writers", node_s,
                     loaded, "s"))
        rows.append(("other shards' puts, during / before", during, before, "puts/s"))

        shard = others[0]
        pid = store.stats()["shards"][shard]["process"]["pid"]
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        proc_s = serve_again(lambda: store.get("b", keys[shard][1]), killed)
        rows.append(("failover, process death / plain open", proc_s, plain, "s"))
        assert store.get_many([("b", k) for k in keys[shard][:1000]]) == [
            value_of(k) for k in keys[shard][:1000]]
    finally:
        store.close()

    rows += split_rows(url, tmp, plain)
    rows += running_rows(url, plain)
    print(f"4 shards x {args.keys} x 1 KiB; Ray health checks {HEALTH}; "
          f"shards on the dead node: {victims}")
    plots.report_ratios("elastic", "failover against a plain open, same run", rows,
                        xlabel="ratio (time rows: lower is better)")
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
