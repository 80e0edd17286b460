"""Conditions of several callers' parts checked in one step, each on its own (pure)."""

import leveled_ray as lr
from leveled_ray.codec import put_change
from leveled_ray.codec.conditions import check_parts
from leveled_ray.codec.index_terms import change_entry

OPTIONS = lr.Options()


def put(key, **condition):
    return put_change("b", key, b"v", OPTIONS, 0.0, **condition)[0]


def test_each_part_holds_or_fails_alone_and_sees_the_parts_before_it():
    stored = {put("old").lkey: change_entry(put("old"), 7, 0)}
    parts = [
        [put("new", if_absent=True)],                      # passes: SQN 10
        [put("new", if_absent=True)],                      # fails: part 1 wrote "new"
        [put("old", if_sqn=7), put("x")],                  # passes: SQNs 11, 12
        [put("old", if_sqn=7)],                            # fails: "old" is at SQN 11 now
        [put("old", if_sqn=11)],                           # passes, after part 3's SQN
        [put("y"), put("new", if_sqn=99)],                 # fails as a whole: atomic
        [put("y", if_absent=True)],                        # passes: part 6 wrote nothing
    ]
    changes = [c for p in parts for c in p]
    failures = check_parts(changes, [len(p) for p in parts], stored.get, 10, 1.0)
    assert [f is None for f in failures] == [True, False, True, False, True, False, True]
    assert failures[1].failures == (("b", "new", None, 10),)
    assert failures[3].failures == (("b", "old", 7, 11),)
    assert failures[5].failures == (("b", "new", 99, 10),)


def test_without_failures_every_part_passes():
    parts = [[put("a")], [put("a", if_sqn=1)], [put("a", if_sqn=2)]]
    failures = check_parts([c for p in parts for c in p], [1, 1, 1], {}.get, 1, 1.0)
    assert failures == [None, None, None]
