"""A name's identity is its type and bytes on every path: ``"k"`` and ``b"k"`` stay two keys,
and a name that is not UTF-8 travels as well as any, through the change feed (Python, Arrow,
a listener), queries, replication and its full sync, compare, Ray Data and the command line,
on both layouts. (Spark: tests/spark/test_spark.py.)"""

import pyarrow as pa
import pytest
import ray
from support.names import (
    NAMED,
    TEXT_VALUES,
    TEXTS,
    assert_holds_named,
    by_name,
    put_named,
    text_names,
)
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.cli import main as cli

pytestmark = pytest.mark.ray

WANT = {(b, k): v for b, k, v in NAMED}


@pytest.fixture(params=[None, 2], ids=["plain", "sharded"])
def layout(request):
    return {} if request.param is None else {"shards": request.param}


def arrow(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def test_every_path_keeps_str_bytes_and_raw_names_apart(ray_cluster, tmp_path, layout,
                                                        capsysbinary):
    url = f"file://{tmp_path}/src"
    store = lr.open(url, **layout)
    try:
        put_named(store)
        assert_holds_named(store)
        with pytest.raises(lr.InvalidArgumentError, match="hex:"):
            store.put("b", "hex:6b", b"a str in the text form of bytes")
        assert by_name(store.changes(0)) == WANT
        with store.listen(0) as feed:  # each shard's changes as they come
            heard: list = []
            wait_until(lambda: heard.extend(feed.poll(timeout=1)) or len(heard) >= len(NAMED))
            assert by_name(heard) == WANT
        batches = list(store.changes_batches(0))
        assert text_names(pa.Table.from_batches(batches)) == TEXTS
        keys = pa.Table.from_batches(list(store.fold_keys_batches()))
        assert text_names(keys) == TEXTS
        objects = pa.Table.from_batches(list(store.fold_objects_batches()))
        assert dict(zip(zip(objects["bucket"].to_pylist(), objects["key"].to_pylist()),
                        objects["value"].to_pylist())) == TEXT_VALUES

        # Replication, then its full sync after the copy lost each name.
        rep = lr.replicate(store, f"file://{tmp_path}/replica", name=f"ident-{len(layout)}",
                           full_sync_s=0)
        try:
            wait_until(lambda: lr.compare(store, f"file://{tmp_path}/replica").differences
                       == [], timeout=60)
        finally:
            rep.close()
        with lr.reader(f"file://{tmp_path}/replica") as replica:
            assert_holds_named(replica)

        # Ray Data: read into a dataset and write it into another store.
        copy_url = f"file://{tmp_path}/copy"
        ds = lr.data.read(store).materialize()  # read once: the read's pin ends with it
        assert text_names(arrow(ds)) == TEXTS
        ds.select_columns(["bucket", "key", "value"]).write_datasink(lr.data.sink(copy_url))
        assert text_names(arrow(lr.data.read_changes(store))) == TEXTS
    finally:
        store.close()
    with lr.reader(copy_url) as copy:
        assert_holds_named(copy)
    assert lr.compare(url, copy_url).differences == []

    # The command line shows each name in its text form, and reads it back.
    capsysbinary.readouterr()
    assert cli.main(["keys", "--url", url]) == 0
    shown = capsysbinary.readouterr().out.decode().splitlines()
    assert sorted(tuple(line.split("\t")) for line in shown) == TEXTS
    for (bucket, key), value in TEXT_VALUES.items():
        assert cli.main(["get", "--url", url, bucket, key]) == 0
        assert capsysbinary.readouterr().out == value
