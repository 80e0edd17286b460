"""The columnar paths of bulk writes and reads, without Ray or Spark: rows checked and keyed
in bulk, runs sorted by key, values gathered from journal blocks."""

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.bulk import write as bulk_write
from leveled_ray.bulk.rows import plain_rows, sorted_run
from leveled_ray.codec import put_change
from leveled_ray.errors import ObjectStoreError
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.options import Options
from leveled_ray.read.queries import value_slices
from leveled_ray.read.store_reader import StoreReader
from leveled_ray.read.views import journal_values

NOW = 1_700_000_000.0
names = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(names, names, st.binary(max_size=40),
                          st.one_of(st.none(), st.integers(1, 10**6))), min_size=1, max_size=30),
       st.booleans())
def test_plain_rows_key_and_hash_as_put_many_does(rows, binary_names):
    buckets, keys, values, ttls = (list(c) for c in zip(*rows))
    if binary_names:
        buckets, keys = [b.encode() for b in buckets], [k.encode() for k in keys]
    batch = pa.record_batch({"bucket": buckets, "key": keys, "value": pa.array(values, pa.binary()),
                             "ttl": pa.array(ttls, pa.int64())})
    table = plain_rows(batch, Options(), NOW)
    assert table is not None
    expected = [put_change(b, k, v, Options(), NOW, ttl=t)[0]
                for b, k, v, t in zip(buckets, keys, values, ttls)]
    assert table.column("lkey").to_pylist() == [c.lkey for c in expected]
    assert table.column("hash").to_pylist() == [c.vhash for c in expected]
    assert table.column("expiry").to_pylist() == [c.expiry for c in expected]
    assert table.column("value").to_pylist() == values


@pytest.mark.parametrize("column, value", [
    ("bucket", "b\x00zero"),  # needs escaping: the per-row path keys it
    ("key", ""),  # refused by the per-row path, with its message
    ("key", "k" * 70_000),
    ("value", None),
    ("ttl", -1),
    ("ttl", float("inf")),
])
def test_rows_that_need_the_per_row_checks_are_left_to_them(column, value):
    row = {"bucket": "b", "key": "k", "value": b"v", "ttl": 5}
    row[column] = value
    types = {"value": pa.binary(), "ttl": pa.float64()}
    batch = pa.record_batch({c: pa.array([v], types.get(c)) for c, v in row.items()})
    assert plain_rows(batch, Options(), NOW) is None


def test_rows_with_index_terms_are_left_to_the_per_row_path():
    batch = pa.record_batch({"bucket": ["b"], "key": ["k"], "value": [b"v"],
                             "indexes": [[{"field": "f_bin", "term_bin": "x", "term_int": None}]]})
    assert plain_rows(batch, Options(), NOW) is None


def test_a_run_is_written_in_key_order_and_the_later_row_of_a_key_wins():
    batch = pa.record_batch({"bucket": ["b"] * 4, "key": ["k3", "k1", "k3", "k2"],
                             "value": [b"first", b"one", b"second", b"two"]})
    journal, ledger = sorted_run(plain_rows(batch, Options(), NOW), 100, 7)
    assert journal.column("sqn").to_pylist() == [100, 101, 102, 103]
    assert journal.column("value").to_pylist() == [b"one", b"two", b"first", b"second"]
    assert ledger.column("sqn").to_pylist() == [100, 101, 103]  # k3 keeps its later row
    assert ledger.column("size").to_pylist() == [3, 3, 6]


def test_journal_values_come_in_the_order_asked_with_repeats(tmp_url):
    plan = bulk_write.begin(tmp_url)
    parts = [bulk_write.write_partition(plan, p, [pa.record_batch({
        "bucket": ["b"] * 3000, "key": [f"k{p}-{i:05d}" for i in range(3000)],
        "value": [b"%d-%d" % (p, i) for i in range(3000)]})]) for p in range(2)]
    bulk_write.commit(plan, parts)
    view = run_sync(StoreReader.open(ObjectStore.from_url(tmp_url)))
    files = view.journal.files
    sqns = [f.min_sqn + i for f in files for i in range(0, f.entries, 7)]
    asked = sqns + sqns[:50]
    random.Random(1).shuffle(asked)
    got = run_sync(journal_values(view.host, view.journal, np.array(asked, np.uint64)))
    # Each value is the one the Journal holds for its SQN, wherever it was asked.
    records = {}
    for info in files:
        records.update(run_sync(view.host.journal(info).fetch_many(asked)))
    assert got.to_pylist() == [records[s].value for s in asked]
    for absent in (files[0].max_sqn + 1, max(f.max_sqn for f in files) + 1):
        with pytest.raises(ObjectStoreError, match="no value for SQNs"):
            run_sync(journal_values(view.host, view.journal,
                                    np.array([sqns[0], absent], np.uint64)))


def test_value_slices_bound_the_bytes_of_a_batch():
    table = pa.table({"size": pa.array([40, 40, 40, 200, 10], pa.uint64())})
    cut = value_slices(table, 100)
    # Each slice holds less than the bound plus one object.
    assert [t.column("size").to_pylist() for t in cut] == [[40, 40], [40], [200, 10]]
    assert value_slices(table, 1000) == [table]
