"""The Spark pipeline on a real local Spark session (``local[2]``): the ``leveled`` data source
against moto's S3 and file:// stores, writes through a running Bookie, and failed jobs.

Run them alone with ``pytest -m spark``.
"""

import random
import threading
import uuid

import pyarrow as pa
import pytest
from support.names import TEXTS, assert_holds_named, put_named, text_names
from support.s3 import S3_BUCKET, s3_options
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.admin.gc import referenced
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest.store import ManifestStore

pytestmark = pytest.mark.spark
spark_mod = pytest.importorskip("leveled_ray.spark")


@pytest.fixture(scope="module")
def spark(ray_cluster):
    # Ray first: Spark's Python workers inherit the environment (Ray's auth token among it)
    # of the moment Spark starts, and some tests reach the store's Bookie from a worker.
    session = spark_mod.session("local[2]", "leveled-ray-tests",
                                **{"spark.sql.shuffle.partitions": "4"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def source_options(url, options=None):
    """Spark options for a store: the URL and the Options fields that differ from defaults."""
    out = {"url": url}
    if options is not None:
        base = lr.Options()
        for name in ("s3_endpoint", "s3_region", "s3_access_key_id", "s3_secret_access_key"):
            if getattr(options.object_store, name) != getattr(base.object_store, name):
                out[f"object_store.{name}"] = str(getattr(options.object_store, name))
    return out


def generated(spark, n, partitions=2, value="v"):
    return spark.range(n).repartition(partitions).selectExpr(
        "concat('b', cast(id % 4 as string)) as bucket", "format_string('k%07d', id) as key",
        f"cast(concat('{value}', cast(id as string)) as binary) as value")


def sorted_rows(table: pa.Table, columns=("bucket", "key", "value")) -> list:
    return table.select(list(columns)).sort_by([("bucket", "ascending"),
                                                ("key", "ascending")]).to_pylist()


@pytest.mark.s3
def test_a_round_trip_of_10k_rows_on_s3(spark, moto_endpoint):
    url = f"s3://{S3_BUCKET}/spark-{uuid.uuid4().hex[:8]}"
    options = s3_options(moto_endpoint)
    opts = source_options(url, options)
    df = generated(spark, 10_000)
    df.write.format("leveled").options(**opts).mode("append").save()
    back = spark.read.format("leveled").options(**opts).option("splits", "4").load()
    assert back.rdd.getNumPartitions() > 1
    got = back.toArrow()
    assert got.num_rows == 10_000
    assert sorted_rows(got) == sorted_rows(df.toArrow())
    assert set(got.column_names) == {"bucket", "key", "value", "sqn", "last_modified"}
    assert got.column("sqn").null_count == 0 and got.column("last_modified").null_count == 0
    with lr.reader(url, options=options) as r:
        assert r.get_many([("b1", "k0000001"), ("b2", "k0009998"), ("b0", "k0000001")]) == [
            b"v1", b"v9998", None]
    assert lr.admin(url, options).list_checkpoints() == []  # the read released its pin


def test_filters_and_options_narrow_the_read(spark, tmp_url):
    generated(spark, 4000).write.format("leveled").option("url", tmp_url).mode("append").save()
    df = spark.read.format("leveled").option("url", tmp_url).load()
    picked = df.filter("bucket = 'b1' and key >= 'k0000100' and key <= 'k0000199'")
    assert sorted(r.key for r in picked.collect()) == [
        f"k{i:07d}" for i in range(100, 200) if i % 4 == 1]
    assert df.filter("bucket = 'b1' and bucket = 'b2'").count() == 0
    assert df.filter("key > 'k0003990'").count() == 9  # not pushed down: Spark applies it
    ranged = (spark.read.format("leveled").option("url", tmp_url).option("bucket", "b3")
              .option("start_key", "k0000003").option("end_key", "k0000019").load())
    assert [r.key for r in ranged.collect()] == [f"k{i:07d}" for i in (3, 7, 11, 15, 19)]
    assert lr.admin(tmp_url).list_checkpoints() == []


def test_index_terms_ttl_and_index_reads(spark, tmp_url):
    people = spark.range(2000).repartition(2).selectExpr(
        "'people' as bucket", "format_string('p%05d', id) as key",
        "cast(cast(id as string) as binary) as value",
        "array(named_struct('field', 'age_int', 'term_bin', cast(null as string), "
        "'term_int', id % 90)) as indexes")
    people.write.format("leveled").option("url", tmp_url).mode("append").save()
    twenties = (spark.read.format("leveled").option("url", tmp_url).option("bucket", "people")
                .option("index", "age_int").option("index_start", "20")
                .option("index_end", "29").load())
    found = {(r.key, r.term) for r in twenties.collect()}
    assert found == {(f"p{i:05d}", i % 90) for i in range(2000) if 20 <= i % 90 <= 29}
    with_terms = (spark.read.format("leveled").option("url", tmp_url)
                  .option("with_indexes", "true").option("bucket", "people")
                  .option("end_key", "p00002").load().collect())
    assert [r.indexes[0].term_int for r in with_terms] == [0, 1, 2]
    # Rewriting some people with a new age moves them in the index; the store agrees.
    people.filter("id < 100").selectExpr(
        "bucket", "key", "value",
        "array(named_struct('field', 'age_int', 'term_bin', cast(null as string), "
        "'term_int', cast(99 as bigint))) as indexes").write.format("leveled").option(
        "url", tmp_url).mode("append").save()
    with lr.reader(tmp_url) as r:
        assert sorted(r.index_query("people", "age_int", 99, 99)) == [
            f"p{i:05d}" for i in range(100)]
        assert "p00025" not in set(r.index_query("people", "age_int", 20, 29))


def test_a_read_at_a_checkpoint_sees_exactly_it_while_writes_go_on(spark, ray_cluster, tmp_url):
    store = lr.open(tmp_url, lr.Options(ledger=dict(l0_max_keys=500, push_keys=100, push_ms=5)))
    try:
        store.put_many([lr.Put("b", f"k{i:05d}", b"v0-%d" % i) for i in range(3000)])
        pin = store.checkpoint(lifetime=600, name="spark-test")
        expected = {f"k{i:05d}": b"v0-%d" % i for i in range(3000)}
        stop, rounds = threading.Event(), []

        def writer():
            rng = random.Random(7)
            while not stop.is_set():
                store.put_many([lr.Put("b", f"k{i:05d}", b"v1") for i in
                                rng.sample(range(6000), 200)])
                rounds.append(1)

        thread = threading.Thread(target=writer)
        thread.start()
        reads = []
        try:
            for _ in range(2):  # a write lands during or after each read: the second
                # read begins after writes its checkpoint must not show
                before = len(rounds)
                reads.append(spark.read.format("leveled").option("url", tmp_url)
                             .option("checkpoint", pin.id).option("splits", "3").load()
                             .select("key", "value").collect())
                wait_until(lambda: len(rounds) > before, timeout=60)
        finally:
            stop.set()
            thread.join()
        for rows in reads:  # the same DataFrame source, read twice: the checkpoint each time
            assert len(rows) == 3000 and {r.key: r.value for r in rows} == expected
        now = spark.read.format("leveled").option("url", tmp_url).load().collect()
        assert {r.key: r.value for r in now} != expected
        assert [c.id for c in store.list_checkpoints()] == [pin.id]
    finally:
        store.close()


def test_a_write_installs_through_the_running_bookie(spark, ray_cluster, tmp_url):
    name = f"spark-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(ledger=dict(l0_max_keys=500, push_keys=100, push_ms=5)),
                    name=name)
    try:
        store.put_many([lr.Put("b0", f"k{i:07d}", b"old") for i in range(0, 4000, 4)])
        stop, written = threading.Event(), []

        def serve():  # the store keeps serving writes and reads during the job
            i = 0
            while not stop.is_set():
                store.put("live", f"k{i:05d}", b"live %d" % i)
                assert store.get("b0", "k0000000") in (b"old", b"v0")
                written.append(i)
                i += 1

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            opts = {"url": tmp_url, "store_name": name,
                    "ray_address": ray_cluster.get_runtime_context().gcs_address}
            generated(spark, 8000).write.format("leveled").options(**opts).mode(
                "append").save()
        finally:
            stop.set()
            thread.join()
        assert written
        assert store.get_many([("b0", "k0000000"), ("b1", "k0007997"), ("live", "k00000")]) == [
            b"v0", b"v7997", b"live 0"]
        assert store.put("b0", "k0000000", b"after") > 0  # later writes are newer
        assert store.get("b0", "k0000000") == b"after"
        assert sum(1 for _ in store.fold_keys("b0")) == 2000
    finally:
        store.close()
    reopened = lr.open(tmp_url)  # the installed files survive a restart
    try:
        assert reopened.get_many([("b0", "k0000000"), ("b3", "k0000003"),
                                  ("live", f"k{written[-1]:05d}")]) == [
            b"after", b"v3", b"live %d" % written[-1]]
        assert sum(1 for _ in reopened.fold_keys()) == 8000 + len(written)
    finally:
        reopened.close()


def test_a_store_opened_by_name_in_the_driver_is_found_by_its_name_alone(spark, tmp_url):
    # What a user tries first: open a named store in the driver, then write and read with
    # only store_name. The session's source joins the driver's Ray cluster (recorded by
    # register), never a new one, and takes the URL and settings from the running store.
    name = f"spark-named-{uuid.uuid4().hex[:6]}"
    store = lr.open(tmp_url, name=name)
    try:
        store.put("b0", "before", b"x")
        generated(spark, 2000).write.format("leveled").option("store_name", name).mode(
            "append").save()
        assert store.get_many([("b1", "k0000001"), ("b0", "before")]) == [b"v1", b"x"]
        got = spark.read.format("leveled").option("store_name", name).load().toArrow()
        assert got.num_rows == 2001
        assert sorted_rows(got)[0] == {"bucket": "b0", "key": "before", "value": b"x"}
    finally:
        store.close()


def write_a_job_that_fails(spark, url: str) -> None:
    """A write of 5 000 rows to bucket ``b9`` whose task of one partition fails late, after
    the other partition's task finished."""
    from pyspark.sql.functions import udf

    @udf("binary")
    def fail_late(i):
        if i == 4321:
            raise ValueError("a task failed on purpose")
        return b"new %d" % i

    bad = spark.range(5000).repartition(2).selectExpr(
        "'b9' as bucket", "format_string('k%07d', id) as key", "id").select(
        "bucket", "key", fail_late("id").alias("value"))
    with pytest.raises(Exception, match="failed on purpose"):
        bad.write.format("leveled").option("url", url).mode("append").save()


def gc_leaves_only_what_manifests_name(url: str, stores: list[str]) -> None:
    """GC passes on ``url`` until every Ledger and journal file of each of ``stores`` (the
    store, or its shards) is named by that store's newest manifest. One pass may not do: a task
    of a failed job, still running when the job failed, can land its files after it."""
    def unnamed() -> list[str]:
        left = []
        for store_url in stores:
            latest = run_sync(ManifestStore(ObjectStore.from_url(store_url)).latest())[1]
            named = referenced(latest)  # its files, and its saved tictac tree
            files = ObjectStore.from_url(store_url)
            left += [m.path for m in files.list("ledger/") + files.list("journal/c/")
                     if m.path not in named]
        return left

    wait_until(lambda: lr.gc(url, min_age=0) is not None and not unnamed(), timeout=60)


def test_a_failed_write_job_leaves_nothing_visible(spark, tmp_url):
    generated(spark, 1000).write.format("leveled").option("url", tmp_url).mode(
        "append").save()
    manifests = ManifestStore(ObjectStore.from_url(tmp_url))
    before = run_sync(manifests.latest())

    write_a_job_that_fails(spark, tmp_url)
    after = run_sync(manifests.latest())
    assert after[1].levels == before[1].levels and after[1].journal == before[1].journal
    with lr.reader(tmp_url) as r:
        assert r.get("b9", "k0000001") is None
        assert sum(1 for _ in r.fold_keys()) == 1000
    # What the finished partition wrote was deleted by abort(); anything else is GC's.
    gc_leaves_only_what_manifests_name(tmp_url, [tmp_url])


def test_a_sharded_store_is_read_per_shard_and_written_to_every_shard_at_once(spark, tmp_url):
    from leveled_ray.codec import checked_key

    name = f"spark-shards-{uuid.uuid4().hex[:6]}"
    store = lr.open(tmp_url, shards=2, name=name)
    try:
        store.put("b0", "before", b"x")
        generated(spark, 4000).write.format("leveled").option("store_name", name).mode(
            "append").save()  # through the running shards
        assert store.get_many([("b1", "k0000001"), ("b0", "before")]) == [b"v1", b"x"]
        for shard in range(2):  # every row went to the shard its key routes to
            keys = list(store.shard(shard).fold_keys())
            assert keys and all(store.shard_map.shard_of(checked_key(b, k, store.options))
                                == shard for b, k in keys)
        back = spark.read.format("leveled").option("store_name", name).option(
            "splits", "4").load()  # at a cut taken through the running store
        assert back.rdd.getNumPartitions() >= 2  # a partition per shard, at least
        got = back.toArrow()
        assert got.num_rows == 4001
        assert sorted_rows(got)[0] == {"bucket": "b0", "key": "before", "value": b"x"}
    finally:
        store.close()
    # No process has it open: the URL alone, a commit without Ray, a read at a checkpoint of
    # its own.
    generated(spark, 1000, value="w").write.format("leveled").option("url", tmp_url).mode(
        "append").save()
    got = spark.read.format("leveled").option("url", tmp_url).load().toArrow()
    assert got.num_rows == 4001
    values = {(r["bucket"], r["key"]): r["value"] for r in sorted_rows(got)}
    assert values[("b1", "k0000001")] == b"w1" and values[("b1", "k0001001")] == b"v1001"
    assert lr.admin(tmp_url).list_checkpoints() == []  # the read released its own


def test_a_failed_write_job_leaves_no_shard_changed(spark, ray_cluster, tmp_url):
    lr.open(tmp_url, shards=2).close()
    generated(spark, 1000).write.format("leveled").option("url", tmp_url).mode(
        "append").save()

    write_a_job_that_fails(spark, tmp_url)
    with lr.reader(tmp_url) as r:
        assert r.get_many([("b9", "k0000001"), ("b9", "k0000002")]) == [None, None]
        assert sum(1 for _ in r.fold_keys()) == 1000
    gc_leaves_only_what_manifests_name(
        tmp_url, [f"{tmp_url}/shard-{shard:03d}" for shard in range(2)])


def test_bad_options_and_columns_are_refused(spark, tmp_url):
    df = generated(spark, 10)
    with pytest.raises(Exception, match="needs option"):
        spark.read.format("leveled").load().collect()
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("leveled").option("url", tmp_url).option("bukket", "x").load()
    with pytest.raises(Exception, match="only appends"):
        df.write.format("leveled").option("url", tmp_url).mode("overwrite").save()
    with pytest.raises(Exception, match="missing"):
        df.select("bucket", "key").write.format("leveled").option("url", tmp_url).mode(
            "append").save()
    with pytest.raises(Exception, match="index read needs a bucket"):
        spark.read.format("leveled").option("url", tmp_url).option("index", "a_bin").option(
            "index_start", "a").option("index_end", "b").load()
    with pytest.raises(Exception, match="takes int terms"):
        spark.read.format("leveled").option("url", tmp_url).option("bucket", "b").option(
            "index", "a_int").option("index_start", "x").option("index_end", "y").load()
    with pytest.raises(Exception, match="no store at"):
        spark.read.format("leveled").option("url", tmp_url).load().collect()
    df.write.format("leveled").option("url", tmp_url).mode("append").save()
    with pytest.raises(Exception, match="no live checkpoint"):
        spark.read.format("leveled").option("url", tmp_url).option(
            "checkpoint", "nope").load().collect()


def test_option_text_is_checked_before_any_task_runs():
    text = {"object_store.s3_allow_http": "true", "url": "x", "ledger.sst_max_keys": "100",
            "ledger.push_ms": "5"}
    assert spark_mod.store_options(text) == lr.Options(
        object_store=dict(s3_allow_http=True), ledger=dict(sst_max_keys=100, push_ms=5.0))
    with pytest.raises(lr.InvalidArgumentError, match="true or false"):
        spark_mod.read_query({"url": "x", "with_indexes": "yes"})
    with pytest.raises(lr.InvalidArgumentError, match="must be a number"):
        spark_mod.store_options({"ledger.sst_max_keys": "many"})
    with pytest.raises(lr.InvalidArgumentError, match="positive int"):
        spark_mod.store_options({"ledger.sst_max_keys": "0"})


# --- Structured Streaming ----------------------------------------------------------------


def _stream_rows(spark, path) -> list[dict]:
    return spark.read.parquet(str(path)).toArrow().to_pylist()


def test_a_stream_of_changes_restarted_from_its_checkpoint_delivers_each_once(
        spark, ray_cluster, tmp_path):
    """persist's snapshot + listen: the contents at a cut, then every change after it, into
    Spark's exactly-once file sink; the query is stopped in the middle of live writes and
    restarted from its checkpoint, then drained with availableNow."""
    url = f"file://{tmp_path}/db"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    store = lr.open(url)
    try:
        cut = store.put_many([lr.Put("b", f"k{i:03d}", b"v0-%d" % i) for i in range(200)])[-1]
        store.delete("b", "k000")
        cut += 1

        def start(**trigger):
            frame = (spark.readStream.format("leveled").option("url", url)
                     .option("startingPosition", "snapshot")
                     .option("maxChangesPerTrigger", "40").load())
            return (frame.writeStream.format("parquet").option("path", str(out))
                    .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

        query = start(processingTime="200 milliseconds")
        query.processAllAvailable()  # the contents batch, at the cut
        for r in range(3):
            store.put_many([lr.Put("b", f"k{i:03d}", b"v%d-%d" % (r + 1, i))
                            for i in range(r * 30, r * 30 + 60)])
            store.delete("b", f"k{r + 150:03d}")
            if r == 0:
                query.processAllAvailable()  # some change batches before the stop
        query.stop()  # somewhere in the middle of those changes
        store.put_many([lr.Put("b", f"n{i}", b"late") for i in range(25)])
        query = start(availableNow=True)
        query.awaitTermination(120)
        assert query.exception() is None
        # availableNow drains in batches within the limit (run as one batch, as Spark does for
        # a source without prepareForTriggerAvailableNow, a restart re-plans its last batch
        # and reads nothing new)
        drained = [p["numInputRows"] for p in query.recentProgress]
        assert sum(drained) >= 25 and max(drained) <= 40

        rows = _stream_rows(spark, out)
        contents = [r for r in rows if r["sqn"] <= cut]
        changes = [r for r in rows if r["sqn"] > cut]
        assert sorted(r["key"] for r in contents) == [f"k{i:03d}" for i in range(1, 200)]
        assert {r["kind"] for r in contents} == {"put"}
        want = list(store.changes(cut))
        assert sorted((r["sqn"], r["kind"], r["key"], r["value"]) for r in changes) == [
            (c.sqn, c.kind, c.key, c.value) for c in want]  # each once: none lost, none twice
        # The query's lease holds a position it committed (Spark commits a batch to its
        # source when it plans the next); the start checkpoint is gone.
        leases = store.list_history_leases()
        assert len(leases) == 1 and cut <= leases[0].sqn <= want[-1].sqn
        assert store.list_checkpoints() == []
    finally:
        store.close()


def test_a_stream_must_say_where_it_starts_and_checks_its_options(spark, tmp_url):
    lr.open(tmp_url).close()
    with pytest.raises(Exception, match="startingPosition"):
        spark.readStream.format("leveled").option("url", tmp_url).load().writeStream.format(
            "console").start().processAllAvailable()
    with pytest.raises(Exception, match="maxChangesPerTrigger must be at least"):
        spark.readStream.format("leveled").option("url", tmp_url).option(
            "startingPosition", "latest").option("maxChangesPerTrigger", "0").load(
        ).writeStream.format("console").start().processAllAvailable()
    with pytest.raises(Exception, match="startingPosition must be"):
        spark.readStream.format("leveled").option("url", tmp_url).option(
            "startingPosition", "yesterday").load().writeStream.format(
            "console").start().processAllAvailable()
    for bad in ("nan", "inf", "0"):
        with pytest.raises(Exception, match="lease_s must be"):
            spark.readStream.format("leveled").option("url", tmp_url).option(
                "startingPosition", "latest").option("lease_s", bad).load(
            ).writeStream.format("console").start().processAllAvailable()


def test_a_streaming_write_must_name_its_writer(spark, tmp_path):
    url = f"file://{tmp_path}/plain"
    lr.open(url).close()
    source = spark.readStream.format("rate").option("rowsPerSecond", 1).load().selectExpr(
        "'b' AS bucket", "CAST(value AS STRING) AS key",
        "CAST(CAST(value AS STRING) AS BINARY) AS value")
    with pytest.raises(Exception, match="writer"):
        query = (source.writeStream.format("leveled").option("url", url)
                 .option("checkpointLocation", str(tmp_path / "ck")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()


@pytest.mark.parametrize("shards", [None, 2])
def test_a_streaming_write_applies_each_batch_once_even_when_spark_runs_it_again(
        spark, tmp_path, shards):
    """Three files, one micro-batch each, written to a store (plain, or sharded: each batch
    one commit across the shards); then Spark is made to run the last batch again (its
    commit-log entry removed, as after a crash before Spark recorded it): the store holds
    each row once."""
    import os
    import shutil

    url = f"file://{tmp_path}/db"
    lr.open(url, shards=shards).close()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for n in range(3):
        spark.range(n * 100, n * 100 + 100).selectExpr(
            "'b' AS bucket", "format_string('k%04d', id) AS key",
            "CAST(concat('v', id) AS BINARY) AS value").write.parquet(str(source / f"f{n}"))
        for f in (source / f"f{n}").glob("*.parquet"):
            shutil.move(str(f), str(source / f"{n}-{f.name}"))
        shutil.rmtree(source / f"f{n}")
    schema = "bucket string, key string, value binary"

    def run():
        query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                 .parquet(str(source)).writeStream.format("leveled").option("url", url)
                 .option("writer", "files-to-store")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                 .start())
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    last = max(int(n) for n in os.listdir(checkpoint / "commits") if n.isdigit())
    assert last >= 2  # one batch per file
    for name in (str(last), f".{last}.crc"):  # Spark will run that batch again
        os.remove(checkpoint / "commits" / name)
    run()
    with lr.reader(url) as r:
        changes = list(r.changes())
        assert sorted(c.key for c in changes) == [f"k{i:04d}" for i in range(300)]
        assert r.get("b", "k0250") == b"v250"


def test_an_incremental_pipeline_reads_changes_aggregates_and_writes_another_store(
        spark, tmp_path):
    """The Spark guide's incremental pipeline: a stream of one store's changes, counted per
    bucket, written to another store in complete mode (each row a put); run again after
    more writes, it reads only what changed and the totals stay exact."""
    src, dst = f"file://{tmp_path}/src", f"file://{tmp_path}/dst"
    checkpoint = str(tmp_path / "checkpoint")
    lr.open(dst).close()

    def run():
        changes = (spark.readStream.format("leveled").option("url", src)
                   .option("startingPosition", "snapshot").load())
        totals = (changes.where("kind = 'put'").groupBy("bucket").count()
                  .selectExpr("'totals' AS bucket", "bucket AS key",
                              "CAST(CAST(count AS STRING) AS BINARY) AS value"))
        query = (totals.writeStream.format("leveled").option("url", dst)
                 .option("writer", "bucket-totals").option("checkpointLocation", checkpoint)
                 .outputMode("complete").trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    with lr.open(src) as store:
        store.put_many([lr.Put(f"b{i % 3}", f"k{i}", b"x") for i in range(30)])
    run()
    with lr.reader(dst) as r:
        assert r.get_many([("totals", f"b{i}") for i in range(3)]) == [b"10"] * 3
    with lr.open(src) as store:
        store.put_many([lr.Put("b0", f"new{i}", b"y") for i in range(5)])
    run()
    with lr.reader(dst) as r:
        assert r.get_many([("totals", f"b{i}") for i in range(3)]) == [b"15", b"10", b"10"]


@pytest.mark.parametrize("shards", [None, 2], ids=["plain", "sharded"])
def test_a_spark_copy_keeps_str_bytes_and_raw_names_apart(spark, tmp_path, shards):
    """Names that differ only in their type, and names that are not UTF-8, read into a
    DataFrame (``string`` name columns: bytes names in their hex: form) and written back."""
    url, copy = f"file://{tmp_path}/src", f"file://{tmp_path}/copy"
    store = lr.open(url, shards=shards) if shards else lr.open(url)
    try:
        put_named(store)
    finally:
        store.close()
    assert text_names(spark.read.format("leveled").option("url", url).load().toArrow()) == TEXTS
    df = spark.read.format("leveled").option("url", url).load()  # a read reads once
    df.select("bucket", "key", "value").write.format("leveled").option("url", copy).mode(
        "append").save()
    with lr.reader(copy) as r:
        assert_holds_named(r)
    assert lr.compare(url, copy).differences == []

    def found(where: str, **options) -> list:
        df = spark.read.format("leveled").option("url", url).options(**options).load()
        return text_names(df.filter(where).toArrow())
    # Filters compare names as text, bytes names' hex: forms included.
    assert found("bucket = 'hex:fe62'") == [("hex:fe62", "k")]
    assert found("bucket = 'b' and key >= 'a' and key <= 'z'") == [
        ("b", "hex:6b"), ("b", "hex:ff726177"), ("b", "k")]
    assert found("bucket = 'b' and key >= 'i'") == [("b", "k")]
    assert found("key = 'hex:6b'", bucket="b") == [("b", "hex:6b")]
    assert found("key = 'k'", bucket="hex:62") == [("hex:62", "k")]
