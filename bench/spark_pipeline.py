"""The Spark pipeline: export throughput against Parquet, ingest throughput against put_many.

One local Spark session (``local[2]``) and one file:// directory hold everything:

* **Export rows/s**: ``--rows`` objects of ``--size`` bytes, read in full by
  ``spark.read.format("leveled")`` (``sum(length(value))`` over every row, so every value is
  read), against ``spark.read.parquet`` of the same rows on the same disk, read the same way.
  The target is at least half of Parquet's rate. ``leveled-ray export`` (no Spark, into
  Parquet files) is measured too.
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

from put_get import bounded  # bench/ is the script's directory

import leveled_ray as lr
import leveled_ray.spark as lrs
from leveled_ray.export import export

PRESETS = {"full": 1_000_000, "ci": 100_000}
BATCH, IN_FLIGHT = 1000, 4


def rows(spark, n: int, size: int):
    reps = max(1, size // 32)  # md5 gives 32 hex characters
    return spark.range(n).selectExpr(
        "concat('b', cast(id % 8 as string)) AS bucket", "format_string('k%010d', id) AS key",
        f"CAST(repeat(md5(cast(id AS string)), {reps}) AS BINARY) AS value")


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def scan_all(df) -> int:
    return df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0].n


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
        leveled = spark.read.format("leveled").option("url", url).option("splits", "8")
        scan_all(spark.read.parquet(parquet))  # warm both readers once
        scan_all(leveled.load())
        out["export leveled"] = n / timed(lambda: scan_all(leveled.load()))
        out["export parquet"] = n / timed(lambda: scan_all(spark.read.parquet(parquet)))
        out["export cli"] = n / timed(lambda: export(url, f"{root}/export", splits=8))
        out["ingest put_many"] = put_many_rate(f"file://{root}/put_many", n, args.size)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{n:,} rows of {args.size} B, local[2], file://")
    print("| measure (rows/s) | leveled-ray | peer | ratio |")
    print("|---|---|---|---|")
    print(f"| export: Spark read of every value | {out['export leveled']:,.0f} | "
          f"spark.read.parquet {out['export parquet']:,.0f} | "
          f"{out['export leveled'] / out['export parquet']:.2f} |")
    print(f"| export: leveled-ray export to Parquet (no Spark) | {out['export cli']:,.0f} | "
          f"spark.read.parquet {out['export parquet']:,.0f} | "
          f"{out['export cli'] / out['export parquet']:.2f} |")
    print(f"| ingest: df.write.format('leveled') | {out['ingest leveled']:,.0f} | "
          f"Bookie put_many {out['ingest put_many']:,.0f} | "
          f"{out['ingest leveled'] / out['ingest put_many']:.2f} |")
    print(f"| ingest: df.write.format('leveled') | {out['ingest leveled']:,.0f} | "
          f"df.write.parquet {out['ingest parquet']:,.0f} | "
          f"{out['ingest leveled'] / out['ingest parquet']:.2f} |")


if __name__ == "__main__":
    main()
