"""Conditional writes: ``if_sqn`` and ``if_absent`` checked against the keys' current entries
(pure; the Bookie applies it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import ConditionFailedError
from .changes import IF_ABSENT, NO_CONDITION, OP_CHECK, OP_RANGE, Change
from .entries import LedgerEntry, is_live
from .index_terms import change_entry
from .keys import split_object_key


def check_conditions(changes: Sequence[Change], known: Callable[[bytes], LedgerEntry | None],
                     first_sqn: int, now_s: float) -> None:
    """Raise :class:`ConditionFailedError` (listing every failure) unless every condition of
    ``changes``, to be written from SQN ``first_sqn``, holds. ``known(key)`` gives a key's
    newest entry before these changes; a change sees the earlier changes of the same call. A
    transaction's checks (``OP_CHECK``) are checked alike, and write nothing."""
    shadow: dict[bytes, LedgerEntry] = {}
    failures = []
    sqn = first_sqn
    for change in changes:
        if change.op == OP_RANGE:
            continue  # checked by the shard on its own (see WritePath.check)
        if change.condition != NO_CONDITION:
            entry = shadow.get(change.lkey) or known(change.lkey)
            current = entry.sqn if is_live(entry, now_s) else None
            if (change.condition == IF_ABSENT and current is not None) or (
                change.condition >= 0 and current != change.condition
            ):
                bucket, key = split_object_key(change.lkey)
                expected = None if change.condition == IF_ABSENT else change.condition
                failures.append((bucket, key, expected, current))
        if change.op != OP_CHECK:
            shadow[change.lkey] = change_entry(change, sqn, 0)
            sqn += 1
    if failures:
        raise ConditionFailedError(f"{len(failures)} condition(s) failed: {failures[:5]}",
                                   tuple(failures))


def check_parts(changes: Sequence[Change], counts: Sequence[int],
                known: Callable[[bytes], LedgerEntry | None], first_sqn: int,
                now_s: float) -> list[ConditionFailedError | None]:
    """Check the conditions of several callers' parts (``counts`` changes each, in order), each
    on its own, as :func:`check_conditions` does for one. A part sees the parts before it that
    passed, with the SQNs they will get; a part that fails is left out and its SQNs go to the
    next. Returns each part's failure, or ``None``."""
    shadow: dict[bytes, LedgerEntry] = {}
    seen = lambda k: shadow.get(k) or known(k)  # noqa: E731
    failures: list[ConditionFailedError | None] = []
    start, sqn = 0, first_sqn
    for count in counts:
        part = changes[start:start + count]
        start += count
        try:
            check_conditions(part, seen, sqn, now_s)
        except ConditionFailedError as exc:
            failures.append(exc)
            continue
        failures.append(None)
        writes = [c for c in part if c.op < OP_CHECK]
        shadow.update((c.lkey, change_entry(c, s, 0)) for s, c in enumerate(writes, sqn))
        sqn += len(writes)
    return failures
