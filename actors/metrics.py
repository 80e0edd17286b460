"""Metrics through Ray: a running store's figures as ``ray.util.metrics``, named ``leveled_*``
and tagged with the store name, on each node's Prometheus endpoint (so in Ray's dashboard and
Grafana setup, with no server of ours).

Nothing is recorded per call on the hot path beyond what ``store.stats()`` already counts,
and one timestamp per call for the latency histograms (:class:`Observations`). Every
``metrics_interval_s`` the Bookie gathers the figures of every actor of the store (the same
dict ``store.stats()`` returns) and :class:`Exporter` publishes them: counters by their change
since the last round, gauges as they are, and the latencies observed meanwhile.

:data:`COUNTERS`, :data:`GAUGES` and :data:`HISTOGRAMS` list every metric; the documentation's
"Metrics" page (docs/operations/metrics.md) is the same list.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger(__name__)

#: Actors whose object-store requests are counted, and where their figures are in ``stats()``.
ACTORS = {"bookie": None, "inker": "inker", "penciller": "penciller", "merges": "merges",
          "compaction": "compaction"}
LATENCY_BOUNDS_S = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
GROUP_BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384]
MAX_OBSERVATIONS = 100_000  # per histogram and round: beyond, the newest are not published
RECENT = 1024  # values kept per histogram for the percentiles of stats()


class Metric(NamedTuple):
    """One metric: its name, help text, tag keys (besides ``store``) and how to read its
    value(s) from the ``stats()`` dict: a number, or ``{tag values: number}``."""

    name: str
    help: str
    tags: tuple[str, ...]
    read: Callable[[dict], object]


def _actor_io(stats: dict, field: str) -> dict:
    """``{(actor, op, kind): count}`` of one ``requests_by``/``retries_by``/``errors_by``."""
    out = {}
    for actor, key in ACTORS.items():
        io = (stats if key is None else stats.get(key, {})).get("io", {})
        for op, kinds in io.get(field, {}).items():
            for kind, n in kinds.items():
                out[(actor, op, kind)] = n
    return out


def write_amplification(stats: dict) -> float:
    """Bytes the store's actors wrote to the object store per byte of keys and values put."""
    written = sum((stats if key is None else stats.get(key, {})).get("io", {}).get(
        "put_bytes", 0) for key in ACTORS.values())
    return written / stats["put_bytes"] if stats.get("put_bytes") else 0.0


_IO = ("actor", "op", "kind")
COUNTERS = [
    Metric("leveled_puts", "changes written (puts and deletes), acknowledged durable", (),
           lambda s: s["changes"]),
    Metric("leveled_put_bytes", "bytes of keys and values written", (),
           lambda s: s["put_bytes"]),
    Metric("leveled_gets", "keys read by get", (), lambda s: s["gets"]),
    Metric("leveled_get_bytes", "value bytes returned by get", (), lambda s: s["get_bytes"]),
    Metric("leveled_heads", "keys read by head", (), lambda s: s["heads"]),
    Metric("leveled_journal_reads", "values read from journal files (value cache misses)", (),
           lambda s: s["journal_reads"]),
    Metric("leveled_group_commits", "journal files written by group commit", (),
           lambda s: s["groups"]),
    Metric("leveled_throttled_writes", "writes slowed down by the write backlog", (),
           lambda s: s["throttled_writes"]),
    Metric("leveled_write_delay_seconds", "time writes spent slowed down by the backlog", (),
           lambda s: s["throttle_ms"] / 1000.0),
    Metric("leveled_object_store_requests", "object-store requests", _IO,
           lambda s: _actor_io(s, "requests_by")),
    Metric("leveled_object_store_retries", "object-store requests tried again", _IO,
           lambda s: _actor_io(s, "retries_by")),
    Metric("leveled_object_store_errors", "object-store requests that failed for good", _IO,
           lambda s: _actor_io(s, "errors_by")),
    Metric("leveled_cache_hits", "cache hits", ("cache",), lambda s: {
        ("file",): s["file_cache"]["hits"], ("value",): s["value_cache"]["hits"]}),
    Metric("leveled_cache_misses", "cache misses", ("cache",), lambda s: {
        ("file",): s["file_cache"]["misses"], ("value",): s["value_cache"]["misses"]}),
    Metric("leveled_l0_flushes", "L0 memory persisted as an SST", (),
           lambda s: s["penciller"].get("l0_flushes", 0)),
    Metric("leveled_merges", "merges run", (), lambda s: s["merges"].get("merges", 0)),
    Metric("leveled_merge_seconds", "time spent merging", (),
           lambda s: s["merges"].get("seconds", 0.0)),
    Metric("leveled_merge_bytes_in", "SST bytes merges read", (),
           lambda s: s["merges"].get("bytes_read", 0)),
    Metric("leveled_merge_bytes_out", "SST bytes merges wrote", (),
           lambda s: s["merges"].get("bytes_written", 0)),
    Metric("leveled_compactions", "journal compactions run", (),
           lambda s: s["compaction"].get("runs", 0)),
    Metric("leveled_compaction_seconds", "time spent compacting the Journal", (),
           lambda s: s["compaction"].get("seconds", 0.0)),
    Metric("leveled_compaction_bytes_in", "journal bytes compactions replaced", (),
           lambda s: s["compaction"].get("bytes_read", 0)),
    Metric("leveled_compaction_bytes_out", "journal bytes compactions wrote", (),
           lambda s: s["compaction"].get("bytes_written", 0)),
    Metric("leveled_gc_deleted", "objects GC deleted", (), lambda s: s["gc_deleted"]),
    Metric("leveled_gc_stopped", "GC passes that stopped on doubt and deleted nothing", (),
           lambda s: s["gc_stopped"]),
    Metric("leveled_reaper_kept", "reaper checks that kept a file on doubt (an owner that did "
           "not answer, a failed delete)", (), lambda s: s["reaper_failures"]),
    Metric("leveled_reaper_deleted", "replaced files the reaper deleted", (),
           lambda s: s["files_deleted"]),
]

GAUGES = [
    Metric("leveled_write_backlog", "changes not yet persisted in an SST", (),
           lambda s: s["backlog"]["unpersisted"]),
    Metric("leveled_queued_groups", "put_many calls waiting for their journal file", (),
           lambda s: s["queued_groups"]),
    Metric("leveled_l0_memory_keys", "Ledger entries in the Penciller's L0 memory", (),
           lambda s: s["penciller"].get("l0_memory_keys", 0)),
    Metric("leveled_l0_files", "SSTs in level 0", (), lambda s: s["penciller"].get("l0_files", 0)),
    Metric("leveled_level_files", "SSTs per level", ("level",), lambda s: {
        (str(i),): n for i, n in enumerate(s["penciller"].get("level_files", []))}),
    Metric("leveled_level_bytes", "SST bytes per level", ("level",), lambda s: {
        (str(i),): n for i, n in enumerate(s["penciller"].get("level_bytes", []))}),
    Metric("leveled_journal_files", "journal files", (), lambda s: s["journal_files"]),
    Metric("leveled_cache_bytes", "bytes held by a cache", ("cache",), lambda s: {
        ("file",): s["file_cache"]["bytes"], ("value",): s["value_cache"]["bytes"]}),
    Metric("leveled_write_amplification", "bytes written to the object store per byte put", (),
           write_amplification),
    Metric("leveled_live_snapshots", "snapshots registered and not yet released", (),
           lambda s: s["penciller"].get("snapshots", 0)),
    Metric("leveled_live_checkpoints", "checkpoints in the newest manifest", (),
           lambda s: s["penciller"].get("checkpoints", 0)),
    Metric("leveled_history_sqn", "every change above this SQN is still in the Journal", (),
           lambda s: s["history"]["history_sqn"]),
    Metric("leveled_history_window_seconds", "Options.history_s: the history window", (),
           lambda s: s["history"]["history_s"]),
    Metric("leveled_history_leases", "live history leases", (),
           lambda s: len(s["history"]["leases"])),
    Metric("leveled_history_bytes", "bytes the latest journal compaction kept only for history",
           (), lambda s: s["compaction"].get("history_bytes", 0)),
    Metric("leveled_bookie_node", "1, tagged with the Ray node that runs the store's (or "
           "shard's) Bookie", ("node",), lambda s: {(s["process"]["node"] or "",): 1}),
]

HISTOGRAMS = [
    Metric("leveled_put_latency_seconds",
           "write calls (put_many, or a client's coalesced puts), arrival to acknowledgement",
           (), LATENCY_BOUNDS_S),
    Metric("leveled_get_latency_seconds", "get and head calls, from arrival to answer", (),
           LATENCY_BOUNDS_S),
    Metric("leveled_group_commit_changes", "changes per journal file of group commit", (),
           GROUP_BOUNDS),
]


def timed(histogram: str):
    """Decorate an async method of an object with an ``observed`` :class:`Observations`: its
    duration goes to ``histogram`` when it returns."""

    def decorate(method):
        @functools.wraps(method)
        async def timed_method(self, *args, **kwargs):
            started = time.perf_counter()
            result = await method(self, *args, **kwargs)
            self.observed.add(histogram, time.perf_counter() - started)
            return result

        return timed_method

    return decorate


class Observations:
    """Values for the histograms, kept as plain lists until the next round (appending a float
    is all the hot path pays), and the most recent ones for ``stats()``'s percentiles."""

    def __init__(self):
        self.values: dict[str, list[float]] = {m.name: [] for m in HISTOGRAMS}
        self.recent: dict[str, deque[float]] = {m.name: deque(maxlen=RECENT)
                                                 for m in HISTOGRAMS}

    def add(self, name: str, value: float) -> None:
        values = self.values[name]
        if len(values) < MAX_OBSERVATIONS:
            values.append(value)
        self.recent[name].append(value)

    def percentiles(self, name: str) -> dict:
        """``p50``/``p90``/``p99`` of the recent values (``{}`` before any)."""
        values = sorted(self.recent[name])
        if not values:
            return {}
        return {f"p{q}": values[min(len(values) - 1, len(values) * q // 100)]
                for q in (50, 90, 99)}

    def take(self) -> dict[str, list[float]]:
        taken, self.values = self.values, {m.name: [] for m in HISTOGRAMS}
        return taken


def counter_deltas(metric: Metric, stats: dict, last: dict) -> list[tuple[tuple, float]]:
    """``(tag values, increase)`` of a counter since ``last`` (updated), for those that grew."""
    value = metric.read(stats)
    values = value if isinstance(value, dict) else {(): value}
    out = []
    for tags, v in values.items():
        key = (metric.name, tags)
        delta = v - last.get(key, 0)
        last[key] = v
        if delta > 0:
            out.append((tags, delta))
    return out


class Exporter:
    """Publishes one store's figures through ``ray.util.metrics`` (needs a Ray worker)."""

    def __init__(self, store_name: str, shard: str = ""):
        from ray.util import metrics

        self.store = {"store": store_name, "shard": shard}  # shard: "" on a plain store
        self.last: dict = {}
        keys = ("store", "shard")
        self.counters = {m.name: metrics.Counter(m.name, m.help, keys + m.tags)
                         for m in COUNTERS}
        self.gauges = {m.name: metrics.Gauge(m.name, m.help, keys + m.tags) for m in GAUGES}
        self.histograms = {m.name: metrics.Histogram(m.name, m.help, m.read, keys)
                           for m in HISTOGRAMS}

    def _tags(self, metric: Metric, values: tuple) -> dict:
        return {**self.store, **dict(zip(metric.tags, values))}

    def publish(self, stats: dict, observed: dict[str, list[float]]) -> None:
        for m in COUNTERS:
            for values, delta in counter_deltas(m, stats, self.last):
                self.counters[m.name].inc(delta, self._tags(m, values))
        for m in GAUGES:
            value = m.read(stats)
            for values, v in (value if isinstance(value, dict) else {(): value}).items():
                self.gauges[m.name].set(v, self._tags(m, values))
        tags = self.store
        for name, values in observed.items():
            histogram = self.histograms[name]
            for v in values:
                histogram.observe(v, tags)


async def export_every(interval_s: float, store_name: str, gather: Callable,
                       observations: Observations, shard: str = "") -> None:
    """Publish ``await gather()`` (the store's ``stats()``) and the observations every
    ``interval_s``, tagged with the store's name and (a sharded store's) shard; a round that
    fails (an actor restarting) is skipped."""
    exporter = Exporter(store_name, shard)
    while True:
        await asyncio.sleep(interval_s)
        try:
            stats = await gather()
        except Exception:
            log.debug("metrics round skipped", exc_info=True)
            continue
        exporter.publish(stats, observations.take())
