"""Conditions of several callers' parts checked in one step, each on its own (pure)."""

import leveled_ray as lr
from leveled_ray.codec import put_change
from leveled_ray.codec.conditions import UNKNOWN_WRITE, Depends, check_parts
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


def test_a_read_of_a_write_in_flight_holds_on_the_sqn_that_write_got():
    """A part names the write it read in flight by the token of the part that made it: an
    earlier part of the same call, or one the Bookie remembers; an unknown one fails."""
    parts = [[put("a")], [put("a", if_sqn=UNKNOWN_WRITE)], [put("a", if_sqn=UNKNOWN_WRITE)],
             [put("a", if_sqn=UNKNOWN_WRITE)], [put("b", if_sqn=UNKNOWN_WRITE)]]
    deps = [Depends(1), Depends(2, ((0, 1),)),  # read part 1's write: its SQN, 10
            Depends(3, ((0, 1),)),              # read it too, but part 2 wrote over it
            Depends(4, ((0, 2),)),              # read part 2's write: SQN 11
            Depends(5, ((0, 99),))]             # a token it does not know: never holds
    failures = check_parts([c for p in parts for c in p], [1] * 5, {}.get, 10, 1.0, deps)
    assert [f is None for f in failures] == [True, True, False, True, False]
    assert failures[2].failures == (("b", "a", 10, 11),)
    assert failures[4].failures == (("b", "b", UNKNOWN_WRITE, None),)
    # A part of an earlier call: the SQN its write of the key got, as the Bookie remembers.
    stored = {put("a").lkey: change_entry(put("a"), 7, 0)}
    remembered = {(8, put("a").lkey): 7}
    failures = check_parts([put("a", if_sqn=UNKNOWN_WRITE)], [1], stored.get, 20, 1.0,
                           [Depends(9, ((0, 8),))], lambda t, k: remembered.get((t, k)))
    assert failures == [None]
    failures = check_parts([put("a", if_sqn=UNKNOWN_WRITE)], [1], stored.get, 20, 1.0,
                           [Depends(9, ((0, 8),))])  # forgotten: a conflict, never a pass
    assert failures[0] is not None
