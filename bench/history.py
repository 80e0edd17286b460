"""History benchmark: the change feed, listeners, Spark streaming, Ray Data and the cost of
history, each against its peer in the same run.

* ``changes()`` rows/s against ``fold_objects(order="sqn")`` over the same store (every key
  written once, so both hand out the same rows);
* ``listen()`` latency, from a put's acknowledgement to the listener seeing it (p50), against
  a single put's p50;
* a Spark stream's rows/s (``startingPosition`` of the store's start, drained with
  ``availableNow`` into a no-op sink) against the batch read of the same store: its
  micro-batch as Spark reports it, and its whole query with the query's start (beside a
  no-work Python stream source's, which is Spark's own cost of a streaming query);
* ``lr.data.read`` rows/s against ``ray.data.read_parquet`` of the same rows;
* write amplification with ``history_s`` = 1 h against 0, for a load that overwrites every
  key 5 times, then compacts its Journal: bytes written to the object store per byte put.

Run: ``python bench/history.py`` (``--quick`` for a smaller run, ``--no-spark`` to leave Spark
out). Prints a table of ratios and saves ``docs/img/history.png``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import ray

import leveled_ray as lr
from leveled_ray.actors.metrics import write_amplification
from leveled_ray.client.ray_connection import ensure_ray

import plots
from put_get import paired_rates, percentile, values

BATCH = 1000


def load(store, n: int, size: int) -> list[str]:
    names = [f"k{i:08d}" for i in range(n)]
    vals = values(n, size, 3)
    for lo in range(0, n, BATCH):
        store.put_many([lr.Put("bench", k, v) for k, v in
                        zip(names[lo:lo + BATCH], vals[lo:lo + BATCH])])
    return names


def feed_rows(store, n: int) -> list[tuple]:
    rate = paired_rates(n, {
        "changes": lambda: sum(b.num_rows for b in store.changes_batches(0, batch_size=65_536)),
        "fold": lambda: sum(b.num_rows for b in store.fold_objects_batches(
            "bench", order="sqn", batch_size=65_536)),
        "changes_py": lambda: sum(1 for _ in store.changes()),
        "fold_py": lambda: sum(1 for _ in store.fold_objects("bench", order="sqn"))})
    return [("changes_batches vs fold_objects_batches(order=sqn) (rows/s)", rate["changes"],
             rate["fold"], ">= 1"),
            ("changes vs fold_objects(order=sqn), Python rows (rows/s)", rate["changes_py"],
             rate["fold_py"], ">= 1")]


def listen_latency(store, samples: int) -> tuple:
    seen: dict[int, float] = {}
    done = threading.Event()
    start = store.put("bench", "listen-start", b"x")

    def follow():
        with store.listen(start) as feed:
            while len(seen) < samples:
                for change in feed.poll(timeout=5):
                    seen[change.sqn] = time.perf_counter()
        done.set()

    thread = threading.Thread(target=follow)
    thread.start()
    time.sleep(0.5)  # the listener is waiting on the Bookie
    acked, puts = {}, []
    for i in range(samples):
        t = time.perf_counter()
        sqn = store.put("bench", f"listen-{i}", b"v")
        acked[sqn] = time.perf_counter()
        puts.append(acked[sqn] - t)
        time.sleep(0.003)
    done.wait(60)
    thread.join(5)
    lag = [seen[s] - at for s, at in acked.items() if s in seen]
    return ("listen: acknowledgement to seen, p50 (ms)", percentile(lag, 0.5) * 1e3,
            percentile(puts, 0.5) * 1e3, "<= 2")


class NoWorkStream:
    """A Python stream source with the leveled stream's schema whose one micro-batch yields
    the same number of rows made once: what a streaming query of Spark's Python data source
    API costs by itself (defined lazily: pyspark is imported only with Spark)."""

    @staticmethod
    def register(spark, rows: int, size: int) -> None:
        from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            SupportsTriggerAvailableNow,
        )

        from leveled_ray.bulk.stream import SPARK_SCHEMA, STREAM_SCHEMA

        class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
            def initialOffset(self):
                return {"n": 0}

            def prepareForTriggerAvailableNow(self):
                pass

            def getDefaultReadLimit(self):
                return ReadAllAvailable()

            def latestOffset(self, start, limit):
                return {"n": rows}

            def partitions(self, start, end):
                half = rows // 2
                return [InputPartition((0, half)), InputPartition((half, rows))]

            def read(self, partition):
                lo, hi = partition.value
                n = min(16_384, hi - lo)
                batch = pa.RecordBatch.from_arrays([
                    pa.array(["bench"] * n), pa.array([f"k{i:08d}" for i in range(n)]),
                    pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
                    pa.array(["put"] * n),
                    pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([b"v" * size] * n, pa.binary())], schema=STREAM_SCHEMA)
                for at in range(lo, hi, n):
                    yield batch.slice(0, min(n, hi - at))

            def commit(self, end):
                pass

        class Source(DataSource):
            @classmethod
            def name(cls):
                return "nowork_stream"

            def schema(self):
                return SPARK_SCHEMA

            def streamReader(self, schema):
                return Reader()

        spark.dataSource.register(Source)


def spark_rows(url: str, n: int, size: int) -> list[tuple]:
    """A stream of every change (``availableNow``, one micro-batch) against the batch read of
    the same store: the micro-batch's rows/s as Spark reports it (rows over the trigger's
    execution time), and the whole query's, start included, beside a no-work stream
    source's whole query."""
    import leveled_ray.spark as lrs

    spark = lrs.session("local[2]", "leveled-ray-history-bench")
    spark.sparkContext.setLogLevel("ERROR")
    NoWorkStream.register(spark, n, size)
    try:
        def stream(reader) -> tuple[float, float]:
            checkpoint = tempfile.mkdtemp(prefix="lr-bench-stream-")
            started = time.perf_counter()
            query = (reader.load().writeStream.format("noop")
                     .option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            wall = time.perf_counter() - started
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            assert sum(p["numInputRows"] for p in progress) == n
            shutil.rmtree(checkpoint, ignore_errors=True)
            return wall, sum(p["durationMs"]["triggerExecution"] for p in progress) / 1e3

        def batch():
            spark.read.format("leveled").option("url", url).load().write.format("noop").mode(
                "overwrite").save()

        ours = spark.readStream.format("leveled").option("url", url).option(
            "startingPosition", "0")
        runs, batch_s, nowork = [], [], []
        for _ in range(3):  # in turn: this machine's speed drifts
            runs.append(stream(ours))
            t = time.perf_counter()
            batch()
            batch_s.append(time.perf_counter() - t)
            nowork.append(stream(spark.readStream.format("nowork_stream"))[0])
        batched, nowork = n / min(batch_s), min(nowork)
    finally:
        spark.stop()
    wall, micro = min(w for w, _ in runs), min(m for _, m in runs)
    return [("Spark stream micro-batch vs batch read (rows/s)", n / micro, batched, ">= 0.8"),
            ("Spark stream whole query, start included, vs batch read (rows/s)", n / wall,
             batched, "reported"),
            ("Spark stream whole query vs a no-work Python stream source (rows/s)", n / wall,
             n / nowork, "reported")]


def ray_data_rows(url: str, root: str, names: list[str], size: int) -> tuple:
    path = f"{root}/same.parquet"
    pq.write_table(pa.table({"bucket": ["bench"] * len(names), "key": names,
                             "value": values(len(names), size, 3)}), path)

    def every_row(ds) -> int:  # not count(): read_parquet answers that from file metadata
        rows = sum(b.num_rows for b in ds.iter_batches(batch_format="pyarrow", batch_size=None))
        assert rows == len(names)
        return rows

    rate = paired_rates(len(names), {
        "ours": lambda: every_row(lr.data.read(  # not the listen-* keys
            url, bucket="bench", start=names[0], end=names[-1])),
        "parquet": lambda: every_row(ray.data.read_parquet(path))})
    return ("lr.data.read vs ray.data.read_parquet (rows/s)", rate["ours"], rate["parquet"],
            ">= 0.5")


def amplification(root: str, keys: int, size: int) -> tuple:
    def run(history_s: float) -> float:
        url = f"file://{root}/amp-{int(history_s)}"
        options = lr.Options(history_s=history_s, journal={"compaction_interval_s": 0})
        store = lr.open(url, options)
        try:
            for _ in range(5):
                load(store, keys, size)
            store.compact_journal(wait=True)
            return write_amplification(store.stats())
        finally:
            store.close()

    kept, none = run(3600), run(0)
    return ("write amplification, history_s=1h vs 0 (bytes written / put)", kept, none,
            "reported")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.latency = 20_000, 100
    ensure_ray()
    root = tempfile.mkdtemp(prefix="lr-bench-history-")
    url = f"file://{root}/leveled"
    rows = []
    try:
        store = lr.open(url)
        names = load(store, args.objects, args.size)
        store.close()
        store = lr.open(url)
        try:
            rows += feed_rows(store, args.objects)
            rows.append(listen_latency(store, args.latency))
        finally:
            store.close()
        if not args.no_spark:
            rows += spark_rows(url, args.objects + 1 + args.latency, args.size)
        rows.append(ray_data_rows(url, root, names, args.size))
        rows.append(amplification(root, max(1000, args.objects // 10), args.size))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{args.objects} objects of {args.size} B, file://\n")
    print("| measure | leveled-ray | peer | ratio | target |")
    print("|---|---|---|---|---|")
    ratios = []
    for what, ours, theirs, target in rows:
        ratio = ours / theirs
        print(f"| {what} | {ours:,.3g} | {theirs:,.3g} | {ratio:.2f} | {target} |")
        ratios.append((what, ratio))
    print("saved", plots.save_ratios("history", "History: leveled-ray / peer", ratios))


if __name__ == "__main__":
    main()
