"""Writer fencing: a second open fences the first, whose later writes never become visible."""

import threading

import pytest

import leveled_ray as lr

pytestmark = pytest.mark.ray


def test_second_open_fences_the_first(ray_cluster, durable_backend):
    url, options = durable_backend
    first = lr.open(url, options)
    first.put("b", "before", b"1")
    second = lr.open(url, options)
    try:
        with pytest.raises(lr.FencedError) as err:
            first.put("b", "late", b"2")
        assert err.value.current_epoch > err.value.epoch
        with pytest.raises(lr.FencedError):  # and it stays fenced
            first.put_many([lr.Put("b", "later", b"3")])
        with pytest.raises(lr.FencedError):
            first.get("b", "before")
        assert second.get("b", "before") == b"1"
        assert second.get("b", "late") is None and second.get("b", "later") is None
        second.put("b", "after", b"4")
    finally:
        first.close()
        second.close()
    third = lr.open(url, options)
    try:
        assert third.get("b", "late") is None and third.get("b", "after") == b"4"
    finally:
        third.close()


def test_fencing_while_the_old_writer_is_busy(ray_cluster, tmp_url):
    """Every write the old writer got acknowledged is kept; every fenced one is invisible."""
    first = lr.open(tmp_url, lr.Options(ledger=dict(push_ms=5)))
    acked, fenced = [], []
    started = threading.Event()

    def write_until_fenced():
        for i in range(100_000):
            try:
                first.put("w", f"k{i}", b"%d" % i)
            except lr.FencedError:
                fenced.append(f"k{i}")
                return
            acked.append(f"k{i}")
            if i == 20:
                started.set()

    writer = threading.Thread(target=write_until_fenced)
    writer.start()
    started.wait(60)
    second = lr.open(tmp_url)
    writer.join(60)
    try:
        assert fenced, "the old writer was never fenced"
        values = second.get_many([("w", k) for k in acked + fenced])
        assert values[: len(acked)] == [k[1:].encode() for k in acked]
        assert values[len(acked):] == [None]
    finally:
        first.close()
        second.close()
