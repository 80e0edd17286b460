"""Object-store faults, injected by wrapping the store client (no internals are patched)."""

import pytest

import leveled_ray as lr
from leveled_ray.files.faults import Fault, FaultInjectingStore

pytestmark = pytest.mark.ray


def test_definite_journal_failure_loses_nothing_else(ray_cluster, tmp_url):
    # The Inker's 3rd journal write (after the fence) fails before reaching the store.
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "journal/", after=3))
    store = lr.open(tmp_url, store=faulty)
    try:
        store.put("b", "k1", b"1")
        store.put("b", "k2", b"2")
        with pytest.raises(lr.ObjectStoreError) as err:
            store.put("b", "k3", b"3")
        assert err.value.definite
        assert store.get("b", "k3") is None
        store.put("b", "k4", b"4")  # the store goes on
        assert store.get_many([("b", "k1"), ("b", "k2"), ("b", "k4")]) == [b"1", b"2", b"4"]
    finally:
        store.close()
    store = lr.open(tmp_url)
    try:
        assert store.get_many([("b", "k3"), ("b", "k4")]) == [None, b"4"]
    finally:
        store.close()


def test_indefinite_journal_failure_stops_writes_until_reopen(ray_cluster, tmp_url):
    # The write reaches the store but its reply is lost: the outcome is unknown to the writer.
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "journal/", after=2,
                                                     applied=True))
    store = lr.open(tmp_url, store=faulty)
    store.put("b", "k1", b"1")
    with pytest.raises(lr.ObjectStoreError) as err:
        store.put("b", "k2", b"2")
    assert not err.value.definite
    with pytest.raises(lr.StoreClosedError):
        store.put("b", "k3", b"3")
    store.close()
    store = lr.open(tmp_url)
    try:  # the write did happen, so recovery finds it
        assert store.get_many([("b", "k1"), ("b", "k2"), ("b", "k3")]) == [b"1", b"2", None]
    finally:
        store.close()


def test_l0_flush_failures_are_retried(ray_cluster, tmp_url):
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "ledger/", count=2))
    store = lr.open(tmp_url, lr.Options(l0_max_keys=100, push_keys=50, push_ms=5), store=faulty)
    try:
        store.put_many([lr.Put("b", f"k{i}", b"v") for i in range(300)])
        from conftest import persisted, wait_until

        wait_until(lambda: persisted(store, 300))
        assert store.stats()["penciller"]["flush_retries"] >= 2
        assert store.get("b", "k299") == b"v"
    finally:
        store.close()


def test_corrupt_journal_is_reported_not_misread(ray_cluster, tmp_path):
    url = f"file://{tmp_path}/db"
    store = lr.open(url)
    store.put("b", "k", b"value")
    store.actors()  # keep the handle alive until the kill
    for actor in store.actors():
        ray_cluster.kill(actor, no_restart=True)
    journal = sorted((tmp_path / "db" / "journal").glob("*.jnl"))
    data_file = max(journal, key=lambda p: p.stat().st_size)
    raw = bytearray(data_file.read_bytes())
    raw[60] ^= 0xFF
    data_file.write_bytes(bytes(raw))
    with pytest.raises(lr.CorruptObjectError) as err:
        lr.open(url)
    assert err.value.path.startswith("journal/")
