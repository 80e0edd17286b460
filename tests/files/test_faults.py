"""Object-store faults, injected by wrapping the store client (no internals are patched)."""

import pytest

import leveled_ray as lr
from leveled_ray.testing.faults import Fault, FaultInjectingStore

pytestmark = pytest.mark.ray


#: Quick retries, so that a fault outlasts them in a few milliseconds.
QUICK = lr.Options(object_store=dict(retry_backoff_s=0.001, retry_max_backoff_s=0.01,
                                     max_retries=3, write_resolve_s=2.0))
#: Enough refused requests to fail one write (every retry of it) for sure.
ONE_WRITE = QUICK.object_store.max_retries + 1


def test_definite_journal_failure_loses_nothing_else(ray_cluster, tmp_url):
    # The Inker's 3rd journal write (after the fence) fails, every retry of it, before
    # reaching the store.
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "journal/", after=3,
                                                     count=ONE_WRITE), options=QUICK)
    store = lr.open(tmp_url, QUICK, store=faulty)
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


def test_a_lost_reply_neither_fails_the_write_nor_closes_the_store(ray_cluster, tmp_url):
    # The write reaches the store but its reply is lost: the Inker reads the slot back, finds
    # its own file, and acknowledges the write.
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "journal/", after=2,
                                                     applied=True), options=QUICK)
    store = lr.open(tmp_url, QUICK, store=faulty)
    store.put("b", "k1", b"1")
    store.put("b", "k2", b"2")
    store.put("b", "k3", b"3")
    assert store.stats()["state"] == "open"
    assert store.stats()["inker"]["io"]["resolved"] >= 1
    store.close()
    store = lr.open(tmp_url)
    try:  # each write is there exactly once
        assert store.get_many([("b", "k1"), ("b", "k2"), ("b", "k3")]) == [b"1", b"2", b"3"]
    finally:
        store.close()


def test_l0_flush_failures_are_retried(ray_cluster, tmp_url):
    faulty = FaultInjectingStore.wrap(tmp_url, Fault("put_if_absent", "ledger/",
                                                     count=2 * ONE_WRITE), options=QUICK)
    store = lr.open(tmp_url, QUICK.replace(ledger=dict(l0_max_keys=100, push_keys=50, push_ms=5)),
                    store=faulty)
    try:
        store.put_many([lr.Put("b", f"k{i}", b"v") for i in range(300)])
        from support.stores import persisted
        from support.waits import wait_until

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
