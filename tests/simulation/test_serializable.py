"""The transaction history checker (``testing/sim/serializable.py``) on hand-made histories:
it finds each known anomaly where the isolation level forbids it, and nothing in serial and
in allowed histories."""

from __future__ import annotations

from leveled_ray.testing.sim.serializable import (
    ABORTED,
    COMMITTED,
    INITIAL,
    UNKNOWN,
    Txn,
    anomalies,
    committed_of,
)


def txn(tid: str, reads: dict, writes=(), outcome: str = COMMITTED, in_flight=()) -> Txn:
    return Txn(tid, dict(reads), tuple(writes), outcome, frozenset(in_flight))


def test_a_serial_history_has_no_anomaly():
    history = [
        txn("t1", {"x": INITIAL, "y": INITIAL}, ["x", "y"]),
        txn("t2", {"x": "t1", "y": "t1"}, ["x"]),
        txn("t3", {"x": "t2", "y": "t1"}, ["y"]),
        txn("r", {"x": "t2", "y": "t3"}),
    ]
    assert anomalies(history) == []
    assert anomalies(history, "snapshot") == []


def test_write_skew_is_refused_under_serializable_only():
    history = [
        txn("t1", {"x": INITIAL, "y": INITIAL}, ["x"]),
        txn("t2", {"x": INITIAL, "y": INITIAL}, ["y"]),
    ]
    found = anomalies(history)
    assert len(found) == 1 and found[0].startswith("cycle (serializable)"), found
    assert anomalies(history, "snapshot") == []


def test_a_lost_update_is_refused_under_both():
    history = [
        txn("t1", {"x": INITIAL}, ["x"]),
        txn("t2", {"x": INITIAL}, ["x"]),
    ]
    for isolation in ("serializable", "snapshot"):
        assert any("lost update of x" in f for f in anomalies(history, isolation))


def test_read_skew_is_refused_under_both():
    # r reads x before t writes x and y, then y after: one rw edge closes the cycle
    history = [
        txn("t", {"x": INITIAL, "y": INITIAL}, ["x", "y"]),
        txn("r", {"x": INITIAL, "y": "t"}),
    ]
    for isolation in ("serializable", "snapshot"):
        found = anomalies(history, isolation)
        assert len(found) == 1 and "cycle" in found[0], (isolation, found)


def test_g2_an_anti_dependency_cycle_of_three():
    history = [
        txn("t1", {"x": INITIAL, "y": INITIAL}, ["y"]),
        txn("t2", {"y": INITIAL, "z": INITIAL}, ["z"]),
        txn("t3", {"z": INITIAL, "x": INITIAL}, ["x"]),
    ]
    assert anomalies(history) and anomalies(history, "snapshot") == []


def test_aborted_reads_and_unknown_outcomes():
    aborted_read = [
        txn("t1", {"x": INITIAL}, ["x"], ABORTED),
        txn("t2", {"x": "t1"}),
    ]
    assert any("aborted" in f for f in anomalies(aborted_read))
    garbage = [txn("t2", {"x": "nobody"})]
    assert any("never written" in f for f in anomalies(garbage))
    # an unknown outcome counts as committed once read, else as aborted: never both
    seen = [txn("t1", {"x": INITIAL}, ["x"], UNKNOWN), txn("t2", {"x": "t1"}, ["x"])]
    assert anomalies(seen) == []
    unseen = [txn("t1", {"x": INITIAL}, ["x"], UNKNOWN), txn("t2", {"x": INITIAL}, ["x"])]
    assert anomalies(unseen) == []
    both = [txn("t1", {"x": INITIAL}, ["x"], UNKNOWN), txn("t2", {"x": "t1"}, ["x"]),
            txn("t3", {"x": INITIAL}, ["x"])]
    assert any("lost update" in f for f in anomalies(both))


def test_a_read_in_flight_proves_a_commit_only_once_its_reader_counts_as_committed():
    """A transaction reads another's write in flight: if that write failed, so did the
    reader, and the write counts as aborted; once the reader committed, it counts as
    committed (and through a chain of such reads)."""
    def history(reader_outcome: str, last_outcome: str = COMMITTED) -> list:
        return [txn("w", {"x": INITIAL}, ["x"], UNKNOWN),
                txn("r", {"x": "w"}, ["x"], reader_outcome, in_flight={"x"}),
                txn("s", {"x": "r"}, ["x"], last_outcome, in_flight={"x"})]
    assert committed_of(history(ABORTED, ABORTED)) == set()
    assert committed_of(history(ABORTED, ABORTED), aborted_readers=True) == set()
    assert committed_of(history(UNKNOWN, ABORTED)) == set()  # read in flight, then failed
    assert committed_of(history(UNKNOWN)) == {"w", "r", "s"}  # s committed: r and w landed
    assert anomalies(history(UNKNOWN)) == []
    read_from_store = [txn("w", {"x": INITIAL}, ["x"], UNKNOWN),
                       txn("r", {"x": "w"}, ["x"], ABORTED)]
    assert committed_of(read_from_store, aborted_readers=True) == {"w"}
    # A committed transaction that read a failed write in flight: an aborted read.
    failed = [txn("w", {"x": INITIAL}, ["x"], ABORTED),
              txn("r", {"x": "w"}, ["x"], COMMITTED, in_flight={"x"})]
    assert any("aborted" in f for f in anomalies(failed))
