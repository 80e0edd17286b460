"""Bulk writes and parallel reads without Spark or Ray: the pieces the Spark data source runs
in its tasks, the split planner, and ``leveled-ray export``."""


import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import leveled_ray as lr
from leveled_ray.bulk import read as bulk_read
from leveled_ray.bulk import write as bulk_write
from leveled_ray.cli import main as cli
from leveled_ray.clock import ManualClock
from leveled_ray.errors import InvalidArgumentError
from leveled_ray.files.sst import SstInfo
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest import Manifest
from leveled_ray.manifest.ingest import IngestConflictError
from leveled_ray.manifest.store import ManifestStore


def rows(lo, hi, value=b"v", bucket="b", **extra):
    n = hi - lo
    cols = {"bucket": [bucket] * n, "key": [f"k{i:06d}" for i in range(lo, hi)],
            "value": [value + b"%d" % i for i in range(lo, hi)]}
    cols.update(extra)
    return pa.record_batch(cols)


def bulk(url, parts, options=None):
    """One bulk write of ``parts`` (a list of batch lists), committed."""
    plan = bulk_write.begin(url, options)
    files = [bulk_write.write_partition(plan, i, batches) for i, batches in enumerate(parts)]
    return bulk_write.commit(plan, files)


def manifest(url):
    return run_sync(ManifestStore(ObjectStore.from_url(url)).latest())[1]


def listed(url, prefix):
    return {m.path for m in ObjectStore.from_url(url).list(prefix)}


def test_bulk_rows_become_visible_at_commit_and_newest_wins(tmp_url):
    plan = bulk_write.begin(tmp_url)
    first = bulk_write.write_partition(plan, 0, [rows(0, 3000)])
    second = bulk_write.write_partition(plan, 1, [rows(2000, 5000, b"w")])
    with lr.reader(tmp_url) as before:
        assert before.get("b", "k000001") is None  # written, not yet visible
    assert bulk_write.commit(plan, [first, second]) == 6000
    with lr.reader(tmp_url) as r:
        assert r.get("b", "k000001") == b"v1"
        # A key in both partitions keeps the later partition's row, in the Ledger and by value.
        assert r.get("b", "k002500") == b"w2500"
        assert sum(1 for _ in r.fold_keys("b")) == 5000
    # A second bulk write is newer than the first.
    bulk(tmp_url, [[rows(0, 10, b"x")]])
    with lr.reader(tmp_url) as r:
        assert r.get_many([("b", "k000000"), ("b", "k000010")]) == [b"x0", b"v10"]
        objects = list(r.fold_objects("b", order="sqn"))
        assert len(objects) == 5000 and objects[-1][2].startswith(b"x")


def test_a_stale_or_repeated_commit_changes_nothing(tmp_url):
    early = bulk_write.begin(tmp_url)
    late = bulk_write.begin(tmp_url)  # no process reserves: the same window
    parts = [bulk_write.write_partition(late, 0, [rows(0, 10)])]
    bulk_write.commit(late, parts)
    stale = [bulk_write.write_partition(early, 0, [rows(0, 10, b"old")])]
    with pytest.raises(IngestConflictError, match="reached SQN"):
        bulk_write.commit(early, stale)
    with lr.reader(tmp_url) as r:
        assert r.get("b", "k000001") == b"v1"


def test_abort_deletes_what_the_partitions_wrote(tmp_url):
    bulk(tmp_url, [[rows(0, 5)]])
    before = listed(tmp_url, "ledger/") | listed(tmp_url, "journal/")
    plan = bulk_write.begin(tmp_url)
    parts = [bulk_write.write_partition(plan, i, [rows(i * 100, i * 100 + 50)]) for i in range(3)]
    assert listed(tmp_url, "ledger/") - before  # the files exist, unreferenced
    bulk_write.abort(plan, parts)
    assert listed(tmp_url, "ledger/") | listed(tmp_url, "journal/") == before
    with lr.reader(tmp_url) as r:
        assert sum(1 for _ in r.fold_keys()) == 5


def test_index_terms_and_ttl_from_columns(tmp_url):
    terms = [[{"field": "age_int", "term_bin": None, "term_int": i % 7}] for i in range(100)]
    bulk(tmp_url, [[rows(0, 100, indexes=terms, ttl=[None] * 50 + [0.5] * 50)]])
    clock = ManualClock()
    clock.advance(1.6)  # expiries are whole seconds: the second half has expired
    with lr.reader(tmp_url, clock=clock) as r:
        assert sorted(r.index_query("b", "age_int", 3, 3)) == [
            f"k{i:06d}" for i in range(50) if i % 7 == 3]
    # A second write resolves against the first: the listed terms replace the old ones, a row
    # without a list keeps its terms.
    hundred = [{"field": "age_int", "term_bin": None, "term_int": 100}]
    bulk(tmp_url, [[rows(0, 10, b"w", indexes=[hundred] * 5 + [None] * 5)]])
    with lr.reader(tmp_url) as r:
        assert sorted(r.index_query("b", "age_int", 100, 100)) == [f"k{i:06d}" for i in range(5)]
        threes = sorted(r.index_query("b", "age_int", 3, 3))
        assert "k000003" not in threes and f"k{10:06d}" in threes
        assert r.head("b", "k000008").indexes == (("age_int", 1),)
    assert not lr.admin(tmp_url).list_checkpoints()  # the resolution view was released


def test_bad_columns_and_rows_are_refused(tmp_url):
    with pytest.raises(InvalidArgumentError, match="missing \\['value'\\]"):
        bulk_write.check_columns(["bucket", "key"])
    with pytest.raises(InvalidArgumentError, match="sqn and last_modified"):
        bulk_write.check_columns(["bucket", "key", "value", "sqn", "last_modified"])
    plan = bulk_write.begin(tmp_url)
    with pytest.raises(InvalidArgumentError, match="bucket"):
        bulk_write.write_partition(plan, 0, [rows(0, 2, bucket="")])
    with pytest.raises(InvalidArgumentError, match="takes int terms"):
        bulk_write.write_partition(plan, 1, [rows(0, 1, indexes=[
            [{"field": "age_int", "term_bin": "x", "term_int": None}]])])
    with pytest.raises(IngestConflictError, match="partitions"):
        bulk_write.write_partition(plan, 1 << 20, [rows(0, 1)])


def test_head_only_stores_refuse_bulk_writes(tmp_path):
    url = f"file://{tmp_path}/h"
    run_sync(ManifestStore(ObjectStore.from_url(url)).create_initial(
        Manifest.new(head_only="with_lookup")))
    with pytest.raises(InvalidArgumentError, match="head_only"):
        bulk_write.begin(url)


def sst(lo, hi, entries):
    return SstInfo(f"ledger/{lo}.sst", 1, entries, 0, lo, hi, 1, 1)


def test_splits_cut_at_sst_first_keys_by_entries():
    levels = ((sst(b"o5", b"o6", 10),),
              (sst(b"o1", b"o2", 100), sst(b"o3", b"o4", 100), sst(b"o7", b"o8", 100)))
    m = Manifest(store_id="s", levels=levels)
    splits = bulk_read.plan_splits(m, b"o", b"p", 3)
    assert splits == [(b"o", b"o3"), (b"o3", b"o5"), (b"o5", b"p")]  # 100, 100, 110
    assert bulk_read.plan_splits(m, b"o", b"p", 1) == [(b"o", b"p")]
    assert bulk_read.plan_splits(Manifest(store_id="s"), b"o", b"p", 8) == [(b"o", b"p")]


def test_export_writes_a_checkpoint_as_parquet(tmp_url, tmp_path, capsys):
    bulk(tmp_url, [[rows(0, 3000)], [rows(3000, 6000)]], lr.Options(ledger=dict(sst_max_keys=500)))
    pin = lr.admin(tmp_url).create_checkpoint(name="export")
    bulk(tmp_url, [[rows(0, 100, b"later")]])  # after the checkpoint: not exported
    out = tmp_path / "out"
    assert cli.main(["export", "--url", tmp_url, "--checkpoint", pin.id, "--to", str(out),
                     "--splits", "4", "--parallel", "2"]) == 0
    assert "exported 6000 row(s)" in capsys.readouterr().out
    table = pq.read_table(out).sort_by("key")
    assert len(list(out.iterdir())) > 1
    assert table.column("key").to_pylist() == [f"k{i:06d}" for i in range(6000)]
    assert table.column("value")[5].as_py() == b"v5"
    # Exported again into a non-empty directory: refused, nothing pinned.
    assert cli.main(["export", "--url", tmp_url, "--to", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [c.id for c in lr.admin(tmp_url).list_checkpoints()] == [pin.id]
    # Without a checkpoint, the export pins its own and releases it.
    assert cli.main(["export", "--url", tmp_url, "--to", str(tmp_path / "now"),
                     "--bucket", "b", "--end", "k000099"]) == 0
    assert pq.read_table(tmp_path / "now").column("value")[0].as_py() == b"later0"
    assert [c.id for c in lr.admin(tmp_url).list_checkpoints()] == [pin.id]


def test_bad_export_and_read_arguments_are_refused(tmp_url, tmp_path):
    from leveled_ray.bulk.export import export

    bulk(tmp_url, [[rows(0, 10)]])
    a_file = tmp_path / "file.parquet"
    a_file.write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="is a file"):
        export(tmp_url, str(a_file))
    with pytest.raises(InvalidArgumentError, match="parallel"):
        export(tmp_url, str(tmp_path / "p"), parallel=0)
    with pytest.raises(InvalidArgumentError, match="splits"):
        bulk_read.begin_read(tmp_url, bulk_read.ReadQuery(), splits=0)
    with pytest.raises(InvalidArgumentError, match="lifetime"):
        bulk_read.begin_read(tmp_url, bulk_read.ReadQuery(), lifetime=-1)
    with pytest.raises(InvalidArgumentError, match="term range, not a key range"):
        bulk_read.check_query(bulk_read.ReadQuery(bucket="b", index="a_bin", term_start="a",
                                                  term_end="b", start="k"))
    with pytest.raises(InvalidArgumentError, match="no store at"):
        bulk_read.begin_read(f"file://{tmp_path}/none", bulk_read.ReadQuery())
    assert lr.admin(tmp_url).list_checkpoints() == []  # nothing pinned by refused calls


@pytest.mark.ray
def test_a_bookie_that_died_mid_write_is_a_closed_store(ray_cluster, tmp_url):
    import ray

    name = f"bulk-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, name=name)
    plan = bulk_write.begin(tmp_url, store_name=name)  # SQNs reserved through the Bookie
    part = bulk_write.write_partition(plan, 0, [rows(0, 10)])
    ray.kill(store.actors()[0], no_restart=True)  # the Bookie (its actors go with it)
    with pytest.raises(lr.StoreClosedError):
        bulk_write.commit(plan, [part])
    with pytest.raises(lr.InvalidArgumentError):  # a new write finds no store of that name
        bulk_write.begin(tmp_url, store_name=name)


def test_a_readers_missing_files_are_damage_unless_its_checkpoint_is_gone(tmp_url):
    bulk(tmp_url, [[rows(0, 4000, value=b"x" * 1000)]])  # many blocks, few cached at once
    pin = lr.admin(tmp_url).create_checkpoint()
    r = lr.reader(tmp_url, pin.id)
    assert r.get("b", "k000000") == b"x" * 1000 + b"0"  # opened
    objects = ObjectStore.from_url(tmp_url)
    for prefix in ("ledger/", "journal/"):
        for meta in objects.list(prefix):
            objects.delete(meta.path)
    with pytest.raises(lr.CorruptObjectError) as damaged:  # the checkpoint is live: damage
        r.get_many([("b", f"k{i:06d}") for i in range(1000, 4000, 100)])
    assert damaged.value.path.startswith(("ledger/", "journal/"))
    lr.admin(tmp_url).delete_checkpoint(pin.id)
    with pytest.raises(lr.CheckpointNotFoundError):  # gone: the reader says so
        r.get_many([("b", f"k{i:06d}") for i in range(1050, 4000, 100)])
