"""History, as pure functions: what journal compaction may drop, the SQN history then begins
after, and history leases in the manifest."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.codec import OP_DELETE, OP_KEY_DELTA, OP_PUT
from leveled_ray.errors import HistoryUnavailableError, InvalidArgumentError
from leveled_ray.manifest import history
from leveled_ray.manifest.journal_compaction import plan_rewrite
from leveled_ray.manifest.model import Manifest, decode, encode
from leveled_ray.manifest.transitions import replace_journal
from leveled_ray.options import RECOVR, RETAIN

KEYS = [b"a", b"b", b"c", b"d"]


@st.composite
def journals(draw):
    """A journal (SQN 1..n), the Ledger's view of it, and one run of it to rewrite."""
    n = draw(st.integers(1, 30))
    ops = [(sqn, draw(st.sampled_from([OP_PUT, OP_PUT, OP_DELETE])), draw(st.sampled_from(KEYS)))
           for sqn in range(1, n + 1)]
    persisted = draw(st.integers(0, n))
    current = {}
    for sqn, op, key in ops:
        current[key] = sqn
    for sqn, op, key in ops:  # a last delete the Ledger's files hold may have been reaped
        if op == OP_DELETE and current[key] == sqn <= persisted and draw(st.booleans()):
            current[key] = None
    lo = draw(st.integers(0, n - 1))
    hi = draw(st.integers(lo + 1, n))
    protect = draw(st.none() | st.integers(0, n))
    strategy = draw(st.sampled_from([RECOVR, RETAIN]))
    return ops, current, (lo, hi), persisted, protect, strategy


@settings(max_examples=400, deadline=None)
@given(journals())
def test_a_rewrite_keeps_every_change_history_still_covers(case):
    ops, current, (lo, hi), persisted, protect, strategy = case
    run = [(sqn, op, key, ((0, "f_bin", "t"),)) for sqn, op, key in ops[lo:hi]]
    fates, bound = plan_rewrite(run, current, persisted, strategy, protect)
    kept = {sqn for sqn, _, _ in ops} - {r[0] for r, f in zip(run, fates)
                                          if f.op in (None, OP_KEY_DELTA)}
    # Whatever the Ledger may still need stays whole.
    for (sqn, _, key, _), fate in zip(run, fates):
        if sqn > persisted or current.get(key) == sqn:
            assert fate.op is not None and fate.keep_value
    # A lease at `protect` is never passed, and everything above it stays.
    if protect is not None:
        assert bound <= protect
    # For every position s at or above the new bound: every change after s is whole, and so
    # is the newest change at or below s of each key changed after s (what the store held at
    # s; a key unchanged since s reads as the Ledger has it now).
    for s in range(bound, len(ops) + 1):
        assert all(sqn in kept for sqn, _, _ in ops if sqn > s)
        for key in KEYS:
            before = [sqn for sqn, _, k in ops if k == key and sqn <= s]
            if before and any(k == key and sqn > s for sqn, _, k in ops):
                assert before[-1] in kept, (s, key)


def test_without_protection_a_replaced_entry_goes_and_history_moves_to_its_successor():
    run = [(1, OP_PUT, b"a", ()), (2, OP_PUT, b"b", ()), (3, OP_PUT, b"a", ())]
    fates, bound = plan_rewrite(run, {b"a": 7, b"b": 2}, 10, RECOVR, None)
    assert [f.op for f in fates] == [None, OP_PUT, None]
    assert bound == 7  # SQN 3 was replaced by SQN 7, outside the run
    fates, bound = plan_rewrite(run[:1], {b"a": None}, 10, RECOVR, None)
    assert fates[0].op is None and bound == 10  # reaped: its successor is at most persisted


def test_a_protected_change_and_its_predecessor_stay():
    run = [(1, OP_PUT, b"a", ()), (2, OP_PUT, b"a", ()), (3, OP_PUT, b"a", ())]
    fates, bound = plan_rewrite(run, {b"a": 9}, 10, RECOVR, 2)
    # 1 was replaced at 2 (within what the lease gave up); 2 is what a view at SQN 2 shows.
    assert [f.op for f in fates] == [None, OP_PUT, OP_PUT] and bound == 2


def _manifest():
    return Manifest.new()


def test_a_lease_is_set_moved_dropped_and_expires():
    m = history.set_lease(_manifest(), "spark-q1", 5, 60, now=100)
    m = history.set_lease(m, "other", 9, 10, now=100)
    assert history.protected_sqn(m, 105, None) == 5
    m = history.set_lease(m, "spark-q1", 12, 60, now=105)
    assert history.protected_sqn(m, 105, None) == 9
    assert history.protected_sqn(m, 111, None) == 12  # "other" expired at 110
    assert history.protected_sqn(m, 111, 3) == 3
    assert history.protected_sqn(history.drop_lease(m, "spark-q1", 111), 111, None) is None
    back = decode(encode(m, 4), "manifest", 4)
    assert back.leases == m.leases and back.history_sqn == m.history_sqn


@pytest.mark.parametrize("name, sqn, lifetime", [
    ("", 1, 10), (7, 1, 10), ("x" * 201, 1, 10), ("q", -1, 10), ("q", True, 10),
    ("q", 1, 0), ("q", 1, "10"),
])
def test_bad_leases_are_refused(name, sqn, lifetime):
    with pytest.raises(InvalidArgumentError):
        history.set_lease(_manifest(), name, sqn, lifetime, now=0)


def test_history_already_gone_refuses_a_lease_and_a_position():
    m = _manifest().with_changes(history_sqn=40)
    with pytest.raises(HistoryUnavailableError) as e:
        history.set_lease(m, "late", 39, 60, now=0)
    assert e.value.history_sqn == 40 and e.value.after == 39
    assert history.set_lease(m, "late", 40, 60, now=0).leases[0].sqn == 40
    history.check_covered(40, 40)
    with pytest.raises(HistoryUnavailableError):
        history.check_covered(40, 12)


def test_a_rewrite_committed_after_a_lower_lease_was_set_is_refused():
    from leveled_ray.files.journal import JournalInfo
    old = JournalInfo("j1", 1, 0, 0, 10, 3, 1, 3)
    new = JournalInfo("c1", -1, 0, 0, 5, 1, 3, 3)
    m = _manifest().with_changes(journal=(old,))
    leased = history.set_lease(m, "q", 2, 60, now=0)
    with pytest.raises(HistoryUnavailableError):
        replace_journal(leased, 0, ("j1",), (new,), 3, 1.0)
    done = replace_journal(m, 0, ("j1",), (new,), 3, 1.0)
    assert done.history_sqn == 3 and [j.name for j in done.journal] == ["c1"]
    # An expired lease does not hold it, and leaves the manifest.
    later = replace_journal(leased, 0, ("j1",), (new,), 3, 100.0)
    assert later.history_sqn == 3 and later.leases == ()


def test_the_history_window_begins_after_the_newest_file_older_than_it():
    written = [(100.0, 10), (200.0, 20), (300.0, 30)]
    assert history.window_sqn(written, 350.0, 0) is None  # no window
    assert history.window_sqn(written, 350.0, 100) == 20  # 30 was written within it
    assert history.window_sqn(written, 350.0, 1000) == 0  # everything is within it
    assert history.window_sqn(written, 10_000.0, 100) == 30


def test_what_history_alone_keeps_is_marked_held():
    run = [(1, OP_PUT, b"a", ()), (2, OP_PUT, b"a", ())]
    fates, _ = plan_rewrite(run, {b"a": 2}, 10, RECOVR, 0)
    assert [f.held for f in fates] == [True, False]  # 2 is current: needed anyway
    fates, _ = plan_rewrite(run, {b"a": 2}, 10, RECOVR, None)
    assert [f.held for f in fates] == [False, False] and fates[0].op is None
