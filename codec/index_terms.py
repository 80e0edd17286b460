"""Keeping an object's index entries in step with the object (pure; the Bookie applies it).

A change's ``indexes`` are deltas, as in leveled: ``("add", field, term)`` and ``("remove",
field, term)``. Before a change is journaled, the Bookie resolves them against the object's
current Ledger entry, so that:

- the object's entry records the terms it now holds (``Head.indexes``), and a put without
  index changes keeps them;
- a delete removes every term the object held, whatever the caller passed;
- a put that changes the object's expiry rewrites its terms, so index entries expire with it.

The resolved change carries exactly the index entries to write, so replaying the Journal (or a
journal compaction's key deltas) rebuilds the same Ledger without looking anything up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .changes import OP_DELETE, OP_PUT, Change
from .entries import ACTIVE, TOMBSTONE, LedgerEntry, is_live, pack_extra, unpack_extra

_ADD, _REMOVE = 0, 1


def held_terms(entry: LedgerEntry | None, now_s: float) -> set[tuple]:
    """The ``(field, term)`` pairs a Ledger entry's object holds (none once deleted/expired)."""
    if not is_live(entry, now_s) or not entry.extra:
        return set()
    return set(unpack_extra(entry.extra)[1])


def resolve(change: Change, current: tuple | None, now_s: float) -> Change:
    """``change`` with its index deltas made exact against the object's ``current`` entry."""
    held = held_terms(current, now_s)
    if change.op == OP_DELETE:
        gone = held | {(f, t) for _, f, t in change.indexes}
        return change._replace(indexes=tuple((_REMOVE, f, t) for f, t in sorted(gone)))
    if not held and not change.indexes:
        return change
    terms = set(held)
    for op, f, t in change.indexes:
        if op == _ADD:
            terms.add((f, t))
        else:
            terms.discard((f, t))
    rewrite_all = current is None or current[2] != change.expiry
    rows = [(_ADD, f, t) for f, t in sorted(terms) if rewrite_all or (f, t) not in held]
    rows += [(_REMOVE, f, t) for f, t in sorted(held - terms)]
    metadata, _, value = unpack_extra(change.extra)
    return change._replace(indexes=tuple(rows), extra=pack_extra(metadata, sorted(terms), value))


def change_entry(change: Change, sqn: int, last_modified_ms: int) -> LedgerEntry:
    """The Ledger entry a change gives its object."""
    if change.op == OP_PUT:
        return LedgerEntry(sqn, ACTIVE, change.expiry, change.vhash, change.size,
                           last_modified_ms, change.extra)
    return LedgerEntry(sqn, TOMBSTONE, 0, 0, 0, last_modified_ms, b"")


def resolve_all(changes: Sequence[Change], current_of: Callable[[bytes], tuple | None],
                now_s: float) -> list[Change]:
    """Resolve a group of changes in order: a later change to the same key sees the earlier
    one. ``current_of(lkey)`` gives the key's entry before the group."""
    seen: dict[bytes, tuple] = {}
    out = []
    for change in changes:
        current = seen[change.lkey] if change.lkey in seen else current_of(change.lkey)
        resolved = resolve(change, current, now_s)
        out.append(resolved)
        seen[change.lkey] = change_entry(resolved, 0, 0)
    return out
