"""Spare Bookies (client/spares.py): an open takes a Bookie process started ahead, which then
serves, fails over and closes as any Bookie does; opens it does not fit start their own."""

from __future__ import annotations

import os
import signal

import pytest
from support.waits import wait_until

import leveled_ray as lr

pytestmark = pytest.mark.ray


@pytest.fixture
def one_spare(ray_cluster):
    before = lr.spare_stats()["keep"]
    lr.keep_spare_bookies(1)
    wait_until(lambda: lr.spare_stats()["waiting"] == 1)
    yield
    lr.keep_spare_bookies(before)


def test_an_open_takes_a_spare_which_serves_fails_over_and_closes(one_spare, tmp_url):
    import ray
    from ray.experimental import internal_kv

    taken = lr.spare_stats()["taken"]
    store = lr.open(tmp_url)
    try:
        assert lr.spare_stats()["taken"] == taken + 1
        assert lr.spare_stats()["waiting"] == 1  # another one started meanwhile
        acked = {f"k{i}": store.put("b", f"k{i}", b"v%d" % i) for i in range(20)}
        epoch = store.stats()["epoch"]
        os.kill(store.stats()["process"]["pid"], signal.SIGKILL)
        # Restarted, the spare finds its store again (kept in Ray's key-value store).
        assert store.get_many([("b", k) for k in acked]) == [b"v%d" % i for i in range(20)]
        assert store.stats()["epoch"] == epoch + 1
        assert store.put("b", "after", b"x") > max(acked.values())
        actor_id = store.actors()[0]._actor_id.hex()
    finally:
        store.close()
    assert internal_kv._internal_kv_get(f"leveled/spare_assignment/{actor_id}".encode()) is None
    assert ray.get_runtime_context().get_job_id()  # still the session's job
    with lr.reader(tmp_url) as r:
        assert r.get("b", "after") == b"x" and r.get("b", "k19") == b"v19"


def test_named_and_detached_stores_start_their_own_bookie(one_spare, tmp_path):
    taken = lr.spare_stats()["taken"]
    named = lr.open(f"file://{tmp_path}/named", name=f"spares-{os.getpid()}")
    try:
        named.put("b", "k", b"v")
        assert lr.connect(f"spares-{os.getpid()}").get("b", "k") == b"v"
    finally:
        named.close()
    other = lr.open(f"file://{tmp_path}/other", options=lr.Options(max_restarts=0))
    other.close()
    assert lr.spare_stats()["taken"] == taken


def test_a_bad_count_is_refused_and_changes_nothing(one_spare):
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(lr.InvalidArgumentError):
            lr.keep_spare_bookies(bad)
    assert lr.spare_stats()["keep"] == 1 and lr.spare_stats()["waiting"] == 1
