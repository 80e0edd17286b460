"""Metrics: the store's figures published through Ray and scraped from the node's Prometheus
endpoint over HTTP, as Prometheus would; and the pure rules behind them."""

import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.actors.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    Metric,
    Observations,
    counter_deltas,
    write_amplification,
)


def scrape(port: int, store: str) -> dict[str, float]:
    """``{sample name without Ray's "ray_" prefix and "_total": value}`` for one store
    (summed over the other labels, such as the worker)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.labels.get("store") != store or "le" in sample.labels:
                continue
            name = sample.name.removeprefix("ray_").removesuffix("_total")
            extra = {k: v for k, v in sample.labels.items() if k in ("actor", "op", "kind",
                                                                      "cache", "level", "node")}
            key = name + "".join(f"|{k}={v}" for k, v in sorted(extra.items()))
            out[key] = out.get(key, 0.0) + sample.value
    return out


@pytest.mark.ray
def test_counters_reach_the_nodes_prometheus_endpoint(ray_cluster, tmp_url):
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(metrics_interval_s=0.5), name=name)
    try:
        store.put_many([lr.Put("b", f"k{i:02d}", b"x" * 100) for i in range(50)])
        for i in range(10):
            store.put("b", f"s{i}", b"y" * 10)
        store.delete("b", "s0")
        assert store.get_many([("b", f"k{i:02d}") for i in range(20)]) == [b"x" * 100] * 20
        store.head("b", "k01")
        stats = store.stats()
        # The node the Bookie runs on serves its metrics.
        (port,) = [n["MetricsExportPort"] for n in ray_cluster.nodes()
                   if n["NodeID"] == stats["process"]["node"]]
        expected = {"leveled_puts": 61, "leveled_gets": 20, "leveled_heads": 1,
                    "leveled_get_bytes": 2000, "leveled_put_latency_seconds_count": 12,
                    "leveled_get_latency_seconds_count": 2}
        seen = wait_until(lambda: (lambda m: m if all(m.get(k) == v for k, v in
                                                      expected.items()) else None)(
            scrape(port, name)), timeout=60, interval=1.0)
        # The same figures as store.stats(), and the object-store requests by kind.
        assert stats["changes"] == 61 and stats["gets"] == 20 and stats["get_bytes"] == 2000
        assert seen["leveled_put_bytes"] == stats["put_bytes"] > 50 * 100
        # One observation per journal file (Ray's histogram sums are approximate: not checked)
        assert (seen["leveled_group_commits"] == seen["leveled_group_commit_changes_count"]
                == stats["groups"] >= 2)
        journal_creates = seen["leveled_object_store_requests|actor=inker|kind=journal|"
                               "op=put_if_absent"]
        assert journal_creates >= stats["groups"]
        assert seen["leveled_write_amplification"] > 0
        assert seen["leveled_cache_hits|cache=value"] == stats["value_cache"]["hits"]
        assert seen[f"leveled_bookie_node|node={stats['process']['node']}"] == 1
    finally:
        store.close()


def test_counters_publish_their_increase_and_gauges_their_value():
    metric = Metric("m", "", ("op",), lambda s: s["by_op"])
    last: dict = {}
    assert counter_deltas(metric, {"by_op": {("get",): 3}}, last) == [(("get",), 3)]
    assert counter_deltas(metric, {"by_op": {("get",): 5, ("put",): 1}}, last) == [
        (("get",), 2), (("put",), 1)]
    assert counter_deltas(metric, {"by_op": {("get",): 5, ("put",): 1}}, last) == []
    stats = {"put_bytes": 100, "io": {"put_bytes": 150}, "inker": {"io": {"put_bytes": 50}},
             "penciller": {}, "merges": {}, "compaction": {}}
    assert write_amplification(stats) == 2.0
    assert write_amplification({**stats, "put_bytes": 0}) == 0.0


def test_observations_are_taken_once_and_bounded():
    observed = Observations()
    for _ in range(3):
        observed.add("leveled_put_latency_seconds", 0.01)
    taken = observed.take()
    assert taken["leveled_put_latency_seconds"] == [0.01] * 3
    assert observed.take()["leveled_put_latency_seconds"] == []
    names = [m.name for m in COUNTERS + GAUGES + HISTOGRAMS]
    assert len(names) == len(set(names)) and all(n.startswith("leveled_") for n in names)
