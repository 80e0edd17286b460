"""Group commit's records and rules: the changes of one ``put_many`` call waiting for their
journal file, and what becomes of queued groups when a journal write fails.

A group is admitted with its conditions checked and its index changes resolved against every
change before it, durable or still queued. When a journal write fails for sure, the groups
queued behind it that touch none of its keys are unaffected and are written as they are; a
group that touches one of its keys was checked against a change that never happened, so it
fails too, definitely, having never been sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..codec import LedgerRows
from .remote import ValueBatch


@dataclass
class Group:
    """One caller's changes, waiting for their journal file to be durable."""

    sqns: range
    #: The group's journal records as columns, without values:
    #: ``(first_sqn, last_modified, ops, keys, indexes, expiries, extras)``.
    records: tuple
    values: ValueBatch
    rows: LedgerRows
    nbytes: int
    future: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def keys(self) -> tuple[bytes, ...]:
        return self.records[3]


def split_queue(failed: Iterable[Group], queued: Iterable[Group]) -> tuple[list[Group],
                                                                             list[Group]]:
    """``(still to write, to fail)``: the queued groups, in order, that touch no key of a
    failed group or of a queued group failed before them, and the rest."""
    touched: set[bytes] = set()
    for group in failed:
        touched.update(group.keys)
    keep, drop = [], []
    for group in queued:
        if touched.isdisjoint(group.keys):
            keep.append(group)
        else:
            drop.append(group)
            touched.update(group.keys)
    return keep, drop
