"""Bad query and head_only inputs are refused with typed errors, before anything is read
(no Ray: an empty point in time, and a local Bookie)."""

import asyncio
import time

import pytest

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import ValueBatch, pack
from leveled_ray.codec import put_change
from leveled_ray.errors import InvalidArgumentError
from leveled_ray.files.store import ObjectStore
from leveled_ray.read.point_in_time import PointInTime
from leveled_ray.read.queries import Queries
from leveled_ray.read.views import LedgerFiles


class EmptyView(Queries):
    def __init__(self, root):
        store = ObjectStore.from_url(f"file://{root}")
        self.view = PointInTime(store.url, lr.Options(), LedgerFiles(0, ((),), 0), [], [], 0,
                                store=store)

    async def _query_view_async(self, needs_values):
        return self.view, None


@pytest.mark.parametrize("call", [
    lambda q: q.fold_keys(batch_size=0),
    lambda q: q.fold_heads(batch_size=True),
    lambda q: q.fold_objects(order="random"),
    lambda q: list(q.fold_keys(None, "a")),
    lambda q: list(q.fold_keys(b"", "a")),
    lambda q: q.index_query("b", "n_int", 1, 2, term_regex="x"),
    lambda q: q.index_query("b", "f_bin", "a", "b", term_regex=3),
    lambda q: q.index_query("b", "f_bin", "a", "b", max_results=-1),
    lambda q: q.index_query("b", "f_bin", "a", "b", max_results=True),
    lambda q: q.index_query("b", "f_bin", "a", 2),
    lambda q: q.index_query("b", "f", "a", "b"),
])
def test_bad_query_arguments_raise(tmp_path, call):
    with pytest.raises(InvalidArgumentError):
        call(EmptyView(tmp_path))


def test_an_empty_point_in_time_answers_every_query(tmp_path):
    q = EmptyView(tmp_path)
    assert q.is_empty() and q.list_buckets() == []
    assert list(q.fold_objects()) == [] and list(q.fold_objects(order="sqn")) == []
    assert list(q.index_query("b", "f_bin", "b", "a")) == []  # start after end: nothing


def test_bad_head_only_modes_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(InvalidArgumentError, match="head_only"):
        lr.open(f"file://{tmp_path}/db", head_only="sometimes")


def test_a_head_only_bookie_refuses_changes_without_their_value(tmp_path):
    options = lr.Options(gc=dict(interval_s=0), journal=dict(compaction_interval_s=0))

    async def run():
        bookie = Bookie(f"file://{tmp_path}/db", options, local=True, head_only="with_lookup")
        await bookie.start()
        try:
            change, value = put_change("b", "k", b"v", options, time.time())
            with pytest.raises(InvalidArgumentError, match="head_only"):
                await bookie.put_many(pack([change]), ValueBatch(inline=[value]))
        finally:
            await bookie.close()

    asyncio.run(run())
