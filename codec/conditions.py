"""Conditional writes: ``if_sqn`` and ``if_absent`` checked against the keys' current entries
(pure; the Bookie applies it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import ConditionFailedError
from .changes import IF_ABSENT, NO_CONDITION, Change
from .entries import LedgerEntry, is_live
from .index_terms import change_entry
from .keys import split_object_key


def check_conditions(changes: Sequence[Change], known: Callable[[bytes], LedgerEntry | None],
                     first_sqn: int, now_s: float) -> None:
    """Raise :class:`ConditionFailedError` (listing every failure) unless every condition of
    ``changes``, to be written from SQN ``first_sqn``, holds. ``known(key)`` gives a key's
    newest entry before these changes; a change sees the earlier changes of the same call."""
    shadow: dict[bytes, LedgerEntry] = {}
    failures = []
    for sqn, change in enumerate(changes, first_sqn):
        if change.condition != NO_CONDITION:
            entry = shadow.get(change.lkey) or known(change.lkey)
            current = entry.sqn if is_live(entry, now_s) else None
            if (change.condition == IF_ABSENT and current is not None) or (
                change.condition >= 0 and current != change.condition
            ):
                bucket, key = split_object_key(change.lkey)
                expected = None if change.condition == IF_ABSENT else change.condition
                failures.append((bucket, key, expected, current))
        shadow[change.lkey] = change_entry(change, sqn, 0)
    if failures:
        raise ConditionFailedError(f"{len(failures)} condition(s) failed: {failures[:5]}",
                                   tuple(failures))
