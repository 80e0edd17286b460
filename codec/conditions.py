"""Conditional writes: ``if_sqn`` and ``if_absent`` checked against the keys' current entries
(pure; the Bookie applies it).

A transaction may have read a key as another commit of its process writes it, that commit
still in flight (see :mod:`leveled_ray.client.transaction`): it cannot know the SQN that
write gets, so its part names the write instead, by the *token* of the part that made it
(:class:`Depends`). The key's condition is then that SQN, which the Bookie knows once that
part passed (``written_by``), or an earlier part of the same call, or else never holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

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


class Depends(NamedTuple):
    """A transaction's part that read writes still in flight: its own ``token`` (which later
    parts may name in turn), and for each change that read one, its index in the part and
    the token of the part that wrote the key."""

    token: int
    reads: tuple[tuple[int, int], ...] = ()


#: The condition of a change whose write is not known (failed, or forgotten): never holds.
UNKNOWN_WRITE = (1 << 63) - 1

#: ``(token, key)`` -> the SQN that the part with that token wrote the key at (``None``: not
#: known).
SqnOfWrite = Callable[[int, bytes], int | None]


def check_parts(changes: Sequence[Change], counts: Sequence[int],
                known: Callable[[bytes], LedgerEntry | None], first_sqn: int,
                now_s: float, deps: Sequence[Depends | None] | None = None,
                written_by: SqnOfWrite = lambda token, lkey: None
                ) -> list[ConditionFailedError | None]:
    """Check the conditions of several callers' parts (``counts`` changes each, in order), each
    on its own, as :func:`check_conditions` does for one. A part sees the parts before it that
    passed, with the SQNs they will get; a part that fails is left out and its SQNs go to the
    next. ``deps``: each part's :class:`Depends`, or ``None``; a read of a write in flight is
    a condition on the SQN ``written_by`` gives, or that an earlier part of these got. Returns
    each part's failure, or ``None``."""
    shadow: dict[bytes, LedgerEntry] = {}
    seen = lambda k: shadow.get(k) or known(k)  # noqa: E731
    here: dict[int, dict[bytes, int]] = {}  # the tokens of the parts passed so far
    failures: list[ConditionFailedError | None] = []
    start, sqn = 0, first_sqn
    for i, count in enumerate(counts):
        part = changes[start:start + count]
        start += count
        dep = deps[i] if deps else None
        if dep is not None and dep.reads:
            part = resolved(part, dep, lambda t, k: here[t].get(k) if t in here
                            else written_by(t, k))
        try:
            check_conditions(part, seen, sqn, now_s)
        except ConditionFailedError as exc:
            failures.append(exc)
            continue
        failures.append(None)
        writes = [c for c in part if c.op < OP_CHECK]
        shadow.update((c.lkey, change_entry(c, s, 0)) for s, c in enumerate(writes, sqn))
        if dep is not None:
            here[dep.token] = {c.lkey: s for s, c in enumerate(writes, sqn)}
        sqn += len(writes)
    return failures


def resolved(part: Sequence[Change], dep: Depends, written_by: SqnOfWrite) -> list[Change]:
    """``part`` with each read of a write in flight made a condition on that write's SQN
    (:data:`UNKNOWN_WRITE` if it is not known)."""
    part = list(part)
    for index, token in dep.reads:
        change = part[index]
        sqn = written_by(token, change.lkey)
        part[index] = change._replace(condition=UNKNOWN_WRITE if sqn is None else sqn)
    return part
