"""Ray Data on the shared Ray cluster: a Dataset written to a store through the bulk path and
read back, with a projection; a write into a running store; and the bounded change feed."""

import pyarrow as pa
import pytest
import ray

import leveled_ray as lr

pytestmark = pytest.mark.ray


def arrow(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def rows(n: int, tag: str = "v"):
    def objects(batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        return pa.table({"bucket": ["b"] * len(ids), "key": [f"k{i:05d}" for i in ids],
                         "value": pa.array([f"{tag}{i}".encode() for i in ids])})
    return ray.data.range(n, override_num_blocks=4).map_batches(objects,
                                                                 batch_format="pyarrow")


def test_a_dataset_round_trips_through_a_store(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    written = rows(3000)
    written.write_datasink(lr.data.sink(url))
    back = arrow(lr.data.read(url)).sort_by("key")
    assert back.column("key").to_pylist() == [f"k{i:05d}" for i in range(3000)]
    assert back.column("value").to_pylist() == [f"v{i}".encode() for i in range(3000)]
    assert set(back.column_names) >= {"bucket", "key", "value", "sqn", "last_modified"}
    assert lr.data.read(url).count() == 3000
    keys_only = arrow(lr.data.read(url).select_columns(["key"]))
    assert keys_only.column_names == ["key"] and keys_only.num_rows == 3000
    one_range = arrow(lr.data.read(url, bucket="b", start="k00010", end="k00019"))
    assert sorted(one_range.column("key").to_pylist()) == [f"k{i:05d}" for i in range(10, 20)]
    assert lr.admin(url).list_checkpoints() == []  # each read let its own pin go


def test_a_dataset_written_into_a_running_store_and_its_changes(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    unnamed = lr.open(f"file://{tmp_path}/unnamed")
    with pytest.raises(lr.InvalidArgumentError, match="name"):
        lr.data.sink(unnamed)
    unnamed.close()
    store = lr.open(url, name=f"rd-{tmp_path.name[-12:]}")
    try:
        first = store.put("b", "before", b"x")
        rows(500, "w").write_datasink(lr.data.sink(store))
        assert store.get("b", "k00042") == b"w42"
        store.delete("b", "k00001")
        changes = arrow(lr.data.read_changes(url, after=first)).sort_by("sqn")
        assert changes.num_rows == 501 == lr.data.read_changes(url, after=first).count()
        assert changes.column("kind").to_pylist()[-1] == "delete"
        assert changes.column("key").to_pylist()[-1] == "k00001"
        assert sorted(changes.column("key").to_pylist()[:-1]) == [f"k{i:05d}"
                                                                   for i in range(500)]
        bounded = arrow(lr.data.read_changes(store, after=0, until=first))
        assert bounded.column("key").to_pylist() == ["before"]
    finally:
        store.close()


def test_bad_sources_are_refused(ray_cluster, tmp_path):
    with pytest.raises(lr.InvalidArgumentError):
        lr.data.read(42)
    with pytest.raises(lr.InvalidArgumentError):
        lr.data.read_changes(f"file://{tmp_path}/nothing-here")
