"""A Bookie's process keeps pandas out: pyarrow imports it the first time it builds an array,
which took about a third of every open (actors/failover.without_pandas)."""

import sys

import pytest

import leveled_ray as lr
from leveled_ray.actors.failover import without_pandas

pytestmark = pytest.mark.ray


def test_a_bookie_writes_reads_and_folds_without_importing_pandas(ray_cluster, tmp_url):
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probes run in the Bookie
    store = lr.open(tmp_url)
    try:
        store.put_many([lr.Put("b", f"k{i}", b"v", indexes=[("add", "i_int", i)])
                        for i in range(50)])
        assert store.get("b", "k7") == b"v"
        assert len(list(store.index_query("b", "i_int", 0, 9))) == 10
        bookie = store.actors()[0]
        assert ray.get(bookie.__ray_call__.remote(_pandas_loaded)) is False
        assert ray.get(bookie.__ray_call__.remote(_pandas_refused)) is True
    finally:
        store.close()


def _pandas_loaded(_actor) -> bool:
    return "pandas" in sys.modules


def _pandas_refused(_actor) -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return True
    return False


def test_where_pandas_is_loaded_already_nothing_changes():
    before = list(sys.meta_path)
    if "pandas" not in sys.modules:
        pytest.importorskip("pandas")
    without_pandas()
    assert sys.meta_path == before
