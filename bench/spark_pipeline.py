"""The Spark pipeline: export throughput against Parquet, ingest throughput against put_many.

One local Spark session (``local[2]``) and one file:// directory hold everything:

* **Export rows/s**: ``--rows`` objects of ``--size`` bytes, read in full by
  ``spark.read.format("leveled")``, against ``spark.read.parquet`` of the same rows (the
  reader's own five columns, written once as Parquet) on the same disk, read the same way.
  Two reads: every value (``count(*)``, ``sum(length(value))``: Parquet reads one column, a
  Python data source always yields all of them) and every column. The target is at least
  half of Parquet's rate. Each read is timed ``--repeat`` times, the kinds taking turns, and
  the best time counts (one read takes about a second here, so single runs are noisy). Also
  measured: a Python data source of the same schema that does no work (it yields one prepared
  batch over and over), which is the most any Python data source can do on this machine, and
  ``leveled-ray export`` (no Spark, into Parquet files).
* **Ingest rows/s**: the same rows written with ``df.write.format("leveled")`` (tasks build the
  files, the commit installs them), against the Bookie's ``put_many`` (batches of 1000, 4 in
  flight, from the driver) of the same rows, and against ``df.write.parquet``.

Run: ``python bench/spark_pipeline.py`` (1M rows of 256 B), or ``--preset ci``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import tempfile
import time

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

import leveled_ray as lr
import leveled_ray.spark as lrs
from leveled_ray.bulk.export import export
from leveled_ray.bulk.read import BATCH_SIZE, ReadQuery

import plots  # bench/ is the script's directory
from put_get import bounded

PRESETS = {"full": 1_000_000, "ci": 100_000}
BATCH, IN_FLIGHT = 1000, 4
SPLITS = 8  # the reader's default


def rows(spark, n: int, size: int):
    reps = max(1, size // 32)  # md5 gives 32 hex characters
    return spark.range(n).selectExpr(
        "concat('b', cast(id % 8 as string)) AS bucket", "format_string('k%010d', id) AS key",
        f"CAST(repeat(md5(cast(id AS string)), {reps}) AS BINARY) AS value")


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class _NoWork(InputPartition):
    def __init__(self, rows: int):
        self.rows = rows


class NoWorkSource(DataSource):
    """The leveled reader's schema and batch size, with rows made once per task and yielded
    over and over: what Spark's Python data source path costs by itself."""

    @classmethod
    def name(cls):
        return "nowork"

    def schema(self):
        return ReadQuery().spark_schema()

    def reader(self, schema):
        return NoWorkReader(int(self.options["rows"]), int(self.options["size"]))


class NoWorkReader(DataSourceReader):
    def __init__(self, rows: int, size: int):
        self.rows, self.size = rows, size

    def partitions(self):
        per = -(-self.rows // SPLITS)
        return [_NoWork(min(per, self.rows - i * per)) for i in range(SPLITS)]

    def read(self, partition):
        n = min(BATCH_SIZE, partition.rows)
        batch = pa.RecordBatch.from_arrays([
            pa.array([f"b{i % 8}" for i in range(n)]), pa.array([f"k{i:010d}" for i in range(n)]),
            pa.array([b"v" * self.size] * n, pa.binary()), pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ], schema=ReadQuery().arrow_schema())
        for start in range(0, partition.rows, n):
            yield batch.slice(0, min(n, partition.rows - start))


def every_value(df) -> int:
    return df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0].n


def every_column(df) -> int:
    return df.selectExpr("count(*) AS n", "sum(length(bucket) + length(key) + length(value))",
                         "sum(sqn)", "max(last_modified)").collect()[0].n


def put_many_rate(url: str, n: int, size: int) -> float:
    """The same rows as :func:`rows`, made in Python, written with ``put_many``."""
    reps = max(1, size // 32)
    buckets = [f"b{i % 8}" for i in range(n)]
    keys = [f"k{i:010d}" for i in range(n)]
    values = [hashlib.md5(str(i).encode()).hexdigest().encode() * reps for i in range(n)]
    store = lr.open(url)
    try:
        async def write(lo):
            hi = min(lo + BATCH, n)
            await store.put_many_async([lr.Put(buckets[i], keys[i], values[i])
                                        for i in range(lo, hi)])

        took = timed(lambda: asyncio.run(bounded(write, range(0, n, BATCH), IN_FLIGHT)))
    finally:
        store.close()
    return n / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="full")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.rows or PRESETS[args.preset]
    root = tempfile.mkdtemp(prefix="lr-spark-bench-")
    url, parquet = f"file://{root}/store", f"{root}/parquet"
    spark = lrs.session("local[2]", "leveled-ray-bench",
                        **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    try:
        df = rows(spark, n, args.size).repartition(2).cache()
        df.count()  # generated once, outside every timing
        out["ingest leveled"] = n / timed(
            lambda: df.write.format("leveled").option("url", url).mode("append").save())
        out["ingest parquet"] = n / timed(lambda: df.write.parquet(parquet))
        spark.dataSource.register(NoWorkSource)
        sources = {
            "leveled": lambda: spark.read.format("leveled").option("url", url).load(),
            "parquet": lambda: spark.read.parquet(f"{root}/exported"),
            "nowork": lambda: spark.read.format("nowork").option("rows", n)
                                   .option("size", args.size).load(),
        }
        sources["leveled"]().write.parquet(f"{root}/exported")  # the same rows, as Parquet
        best = {}
        for turn in range(args.repeat + 1):  # the first turn warms every reader
            for query in (every_value, every_column):
                for name, source in sources.items():
                    took = timed(lambda: query(source()))
                    key = (name, query.__name__)
                    if turn:
                        best[key] = min(best.get(key, took), took)
        out.update({key: n / took for key, took in best.items()})
        out["export cli"] = n / timed(lambda: export(url, f"{root}/export", splits=8))
        out["ingest put_many"] = put_many_rate(f"file://{root}/put_many", n, args.size)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{n:,} rows of {args.size} B, local[2], file://")
    print("| measure (rows/s) | leveled-ray | peer | ratio |")
    print("|---|---|---|---|")

    ratios = []

    def row(what, ours, peer, theirs):
        print(f"| {what} | {ours:,.0f} | {peer} {theirs:,.0f} | {ours / theirs:.2f} |")
        ratios.append((f"{what} vs {peer}", ours / theirs))

    for query in ("every_value", "every_column"):
        read = query.replace("_", " ")
        pq_rate, nowork = out[("parquet", query)], out[("nowork", query)]
        row(f"export: Spark read of {read}", out[("leveled", query)], "spark.read.parquet",
            pq_rate)
        row(f"export: Spark read of {read}", out[("leveled", query)],
            "Python data source doing no work", nowork)
        row(f"export: Python data source doing no work, {read}", nowork, "spark.read.parquet",
            pq_rate)
    row("export: leveled-ray export to Parquet (no Spark)", out["export cli"],
        "spark.read.parquet (every column)", out[("parquet", "every_column")])
    row("ingest: df.write.format('leveled')", out["ingest leveled"], "Bookie put_many",
        out["ingest put_many"])
    row("ingest: df.write.format('leveled')", out["ingest leveled"], "df.write.parquet",
        out["ingest parquet"])
    path = plots.save_ratios("spark_pipeline", "Spark pipeline rows/s: leveled-ray / peer",
                             ratios)
    if path:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
