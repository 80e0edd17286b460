"""Replication's pure rules (replicate/rules.py)."""

import leveled_ray as lr
from leveled_ray.admin.compare import DIFFERENT, MISSING_IN_A, MISSING_IN_B, Difference
from leveled_ray.read.changes import Change
from leveled_ray.replication.rules import (
    BUCKET,
    MARK,
    Repair,
    advance,
    position_of,
    position_write,
    repairs,
    write_of,
)


def change(kind="put", value=b"v", expires_at=None, shard=None, sqn=7):
    return Change("b", "k", sqn, kind, value, 100.0, expires_at, {"m": 1},
                  (("add", "f_int", 3),), shard)


def test_a_change_becomes_the_same_write_marked_with_its_source():
    put = write_of(change(expires_at=130.0), "src", now=110.0)
    assert isinstance(put, lr.Put) and put.value == b"v" and put.expires_at == 130.0
    assert put.metadata == {"m": 1, MARK: "src"} and put.indexes == (("add", "f_int", 3),)
    assert isinstance(write_of(change("delete", None), "src", 110.0), lr.Delete)
    expired = write_of(change(expires_at=105.0), "src", now=110.0)
    assert isinstance(expired, lr.Delete)  # gone on the source by now: gone here too


def test_the_position_moves_with_each_change_and_is_read_back():
    assert advance(3, change(sqn=7)) == 7
    assert advance({"0": 4, "1": 2}, change(sqn=9, shard=1)) == {"0": 4, "1": 9}
    record = position_write("r", {"0": 4}, "src", 100.0, None)
    assert record.bucket == BUCKET and position_of(record.value, 0) == {"0": 4}
    assert record.if_absent and record.if_sqn is None  # the first record
    after = position_write("r", {"0": 9}, "src", 101.0, 17)  # replaces the one at SQN 17 only
    assert after.if_sqn == 17 and not after.if_absent
    assert position_of(None, {"0": 0}) == {"0": 0}


def test_a_full_sync_repairs_the_replicators_objects_and_leaves_foreign_writes_alone():
    d = {kind: Difference("b", kind, kind) for kind in (DIFFERENT, MISSING_IN_A, MISSING_IN_B)}
    position = Difference(BUCKET, "r", MISSING_IN_A)
    mine = {("b", DIFFERENT): True, ("b", MISSING_IN_A): True}
    assert repairs([*d.values(), position], mine) == [
        Repair(d[DIFFERENT], "copy"), Repair(d[MISSING_IN_A], "delete"),
        Repair(d[MISSING_IN_B], "copy")]
    foreign = {("b", DIFFERENT): False, ("b", MISSING_IN_A): False}
    assert [r.action for r in repairs(d.values(), foreign)] == ["foreign", "foreign", "copy"]
