"""The one rule every deleter follows: an object is deleted only when the pass *proved* that
nothing needs it.

A deleter (GC, the reaper, clone detach, backup's removal at its target, destroy) first gathers
a :class:`Proof`: the objects that something may still read, and every question it could not
answer (a failed read, a record it could not decode, an owner that did not reply). Then
:func:`deletable` decides. While any doubt stands, nothing is deleted: a delete cannot be taken
back, and keeping an object one pass longer costs only space.

The version rule (:func:`pinned_below`) is the same for every owner of files: a file that
manifest version ``V`` removed is still needed while anything (a snapshot, a checkpoint, a
read, a lease) reads a version older than ``V`` (leveled's ``ready_to_delete``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Proof:
    """What a deleter learnt before deleting: the objects something may still read
    (``needed``) and the questions it could not answer (``doubts``, in words)."""

    needed: frozenset[str] = frozenset()
    doubts: tuple[str, ...] = field(default=())

    def need(self, names: Iterable[str]) -> Proof:
        return Proof(self.needed | frozenset(names), self.doubts)

    def doubt(self, why: str) -> Proof:
        return Proof(self.needed, self.doubts + (why,))

    @property
    def certain(self) -> bool:
        return not self.doubts


def deletable(candidates: Iterable[str], proof: Proof) -> list[str]:
    """The candidates that may be deleted: none while any doubt stands, otherwise those that
    nothing needs (in the order given)."""
    if proof.doubts:
        return []
    return [c for c in candidates if c not in proof.needed]


def pinned_below(removed_in: int, pins: Iterable[int]) -> bool:
    """Does any pin (the manifest version a snapshot, checkpoint, read or lease reads) read a
    version older than ``removed_in``, one that still lists a file removed by ``removed_in``?"""
    return any(p < removed_in for p in pins)
