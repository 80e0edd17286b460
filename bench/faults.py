"""Faults benchmark: durable put_many on S3 (moto on 127.0.0.1) behind the fault-injecting
proxy, at 0%, 1% and 5% of requests failing (5xx, lost replies, delays past the request
timeout, reset connections, mixed), in one run.

For each rate: puts/s (durable ``put_many`` of --batch values of --value-bytes, from --clients
threads at once), p50/p99 acknowledgement latency, store closures (``StoreClosedError``) and
lost acknowledgements (acknowledged values missing or wrong when read back after the proxy
heals). Ratios are against the fault-free run and the request timeout, measured in the same
run. Targets at 5%: throughput >= 0.7x fault-free, p99 <= 2x the request timeout, no closure,
no lost acknowledgement.

Run: ``python bench/faults.py`` (``--quick`` for a short run). Writes ``docs/img/faults.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402

import leveled_ray as lr  # noqa: E402
from leveled_ray.testing.fault_proxy import FaultProxy  # noqa: E402

from plots import IMAGES  # noqa: E402
from put_get import percentile, start_moto  # noqa: E402


def options(endpoint, timeout, hedge):
    return lr.Options(
        object_store=dict(s3_endpoint=endpoint, s3_region="us-east-1", s3_access_key_id="bench",
                          s3_secret_access_key="bench", request_timeout_s=timeout,
                          connect_timeout_s=timeout, write_resolve_s=10 * timeout,
                          retry_max_backoff_s=0.5, hedge_requests=hedge),
        gc=dict(interval_s=0), journal=dict(compaction_interval_s=0))


def run_rate(endpoint, proxy, rate, args):
    url = f"s3://bench/faults-{uuid.uuid4().hex[:8]}"
    store = lr.open(url, options(proxy.endpoint, args.timeout, not args.no_hedge))
    value = b"v" * args.value_bytes
    acked: dict[str, bytes] = {}
    latencies: list[float] = []
    counts = {"closed": 0, "definite": 0, "indefinite": 0}
    lock = threading.Lock()
    proxy.set_faults(rate, args.modes.split(","))
    proxy.faults.clear()
    stop = time.monotonic() + args.seconds

    def client(c):
        n = 0
        while time.monotonic() < stop:
            keys = [f"c{c}-{n}-{i}" for i in range(args.batch)]
            n += 1
            started = time.perf_counter()
            try:
                store.put_many([lr.Put("b", k, value) for k in keys])
            except lr.StoreClosedError:
                with lock:
                    counts["closed"] += 1
                continue
            except lr.ObjectStoreError as exc:
                with lock:
                    counts["definite" if exc.definite else "indefinite"] += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - started)
                acked.update(dict.fromkeys(keys, value))

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    injected = sum(proxy.faults.values())
    proxy.heal()
    keys = sorted(acked)
    lost = 0
    for i in range(0, len(keys), 5000):
        chunk = keys[i:i + 5000]
        got = store.get_many([("b", k) for k in chunk])
        lost += sum(1 for k, v in zip(chunk, got) if v != acked[k])
    stats = store.stats()
    store.close()
    return {"rate": rate, "puts_s": len(acked) / elapsed, "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99), "lost": lost, "faults": injected,
            "requests": proxy.requests, "state": stats["state"],
            "retries": stats["io"]["retries"] + stats["inker"]["io"]["retries"],
            "hedges": stats["io"]["hedges"] + stats["inker"]["io"]["hedges"],
            "sealed": stats["inker"]["sealed_slots"], **counts}


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    rates = [f"{r['rate']:.0%}" for r in rows]
    a.bar(rates, [r["puts_s"] for r in rows], color="#4c72b0")
    a.set_title("durable puts/s")
    a.set_xlabel("requests failing")
    b.plot(rates, [r["p50"] * 1000 for r in rows], "o-", label="p50")
    b.plot(rates, [r["p99"] * 1000 for r in rows], "o-", label="p99")
    b.axhline(2000 * rows[0]["timeout"], color="grey", ls="--", label="2x request timeout")
    b.set_title("put_many acknowledgement (ms)")
    b.set_xlabel("requests failing")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per fault rate")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=1.0, help="request timeout (s)")
    parser.add_argument("--rates", default="0,0.01,0.05")
    parser.add_argument("--modes", default="5xx,lost,delay,reset",
                        help="fault modes to mix (of 5xx, lost, delay, reset)")
    parser.add_argument("--no-hedge", action="store_true", help="never hedge a slow request")
    parser.add_argument("--quick", action="store_true", help="a short run (CI smoke)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 4.0
    tmp = tempfile.mkdtemp(prefix="lr-bench-ray-")
    ray.init(namespace="leveled", include_dashboard=False, log_to_driver=False,
             logging_level="WARNING", _temp_dir=tmp)
    server, endpoint = start_moto()
    rows = []
    try:
        with FaultProxy(endpoint, delay_s=args.timeout * 1.5, seed=1) as proxy:
            for rate in (float(r) for r in args.rates.split(",")):
                row = run_rate(endpoint, proxy, rate, args)
                row["timeout"] = args.timeout
                rows.append(row)
                print(f"  {rate:.0%}: {row['puts_s']:,.0f} puts/s, p50 {row['p50']*1000:.0f} ms,"
                      f" p99 {row['p99']*1000:.0f} ms, {row['faults']} faults in "
                      f"{row['requests']} requests", flush=True)
    finally:
        server.stop()
        ray.shutdown()
    base = rows[0]
    print(f"\nput_many of {args.batch} x {args.value_bytes} B, {args.clients} clients, "
          f"{args.seconds:g} s per rate, request timeout {args.timeout:g} s, moto S3 via proxy")
    print("| faults | puts/s | x fault-free | p50 ms | p99 ms | p99 / timeout | retries | "
          "hedges | sealed | failed (definite / indefinite) | closures | lost acks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rate']:.0%} | {r['puts_s']:,.0f} | {r['puts_s'] / base['puts_s']:.2f} | "
              f"{r['p50']*1000:.0f} | {r['p99']*1000:.0f} | {r['p99'] / args.timeout:.2f} | "
              f"{r['retries']} | {r['hedges']} | {r['sealed']} | "
              f"{r['definite']} / {r['indefinite']} | {r['closed']} | {r['lost']} |")
    worst = rows[-1]
    print(f"\ntargets at {worst['rate']:.0%}: throughput {worst['puts_s'] / base['puts_s']:.2f}x "
          f"(>= 0.7), p99 {worst['p99'] / args.timeout:.2f}x timeout (<= 2), closures "
          f"{sum(r['closed'] for r in rows)} (0), lost {sum(r['lost'] for r in rows)} (0)")
    path = plot(rows, os.path.join(IMAGES, "faults.png"))
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
