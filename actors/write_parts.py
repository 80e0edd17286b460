"""The parts of a Bookie's shared write call (a client's coalesced puts and transactions'
commits): the changes of the parts that passed their checks, and the SQNs that recent
transactions' parts got, by token (see :mod:`leveled_ray.codec.conditions`)."""

from __future__ import annotations

import itertools
from collections import OrderedDict

from ..codec import Change, is_check, written
from ..codec.conditions import Depends
from ..errors import InvalidArgumentError
from .remote import ValueBatch


def passed(changes: list[Change], counts: list[int], failures: list,
           values: ValueBatch) -> tuple[list[Change], ValueBatch]:
    """The changes and values of the parts that did not fail. Only a write of several parts
    (a client's coalesced puts, whose values always travel inline) has some of each."""
    if values.inline is None:
        raise InvalidArgumentError("the values of a write of several parts travel inline")
    keep = [not failure for count, failure in zip(counts, failures) for _ in range(count)]
    return ([c for c, k in zip(changes, keep) if k],
            ValueBatch(inline=[v for v, k in zip(values.inline, keep) if k]))


def without_checks(changes: list[Change], counts: list[int]) -> tuple[list[Change], list[int]]:
    """The changes that write, and how many of them each part has: a transaction's checks
    (the end of its part) are checked with the conditions, and written nowhere. Several
    transactions' commits can come in one write (a client's coalesced commits)."""
    ends = itertools.accumulate(counts)
    if not any(count and is_check(changes[end - 1]) for end, count in zip(ends, counts)):
        return changes, counts
    kept, kept_counts, start = [], [], 0
    for count in counts:
        part = written(changes[start:start + count])
        start += count
        kept += part
        kept_counts.append(len(part))
    return kept, kept_counts


class WrittenBy:
    """The SQN each recent transaction part's writes got, by the part's token: what a later
    part that read those writes in flight is checked against (the key's current SQN must be
    that one). A part whose journal write failed stays here: its SQNs never become current,
    since a Bookie gives no SQN twice, and this map does not outlive the Bookie. Holds the
    newest ``most`` parts; a forgotten one makes its readers' checks fail (a conflict, never
    a wrong answer)."""

    def __init__(self, most: int = 1 << 16):
        self.most = most
        self._sqns: OrderedDict[int, dict[bytes, int]] = OrderedDict()

    def __call__(self, token: int, lkey: bytes) -> int | None:
        written = self._sqns.get(token)
        return None if written is None else written.get(lkey)

    def remember(self, changes: list[Change], counts: list[int], failures: list,
                 deps: list[Depends | None], first_sqn: int) -> None:
        """The passed parts' writes: ``changes`` from SQN ``first_sqn``, ``counts`` per part,
        the failed ones' left out."""
        start = 0
        for count, failure, dep in zip(counts, failures, deps):
            if failure:
                continue
            if dep is not None:
                part = changes[start:start + count]
                self._sqns[dep.token] = dict(zip((c.lkey for c in part),
                                                 itertools.count(first_sqn + start)))
            start += count
        while len(self._sqns) > self.most:
            self._sqns.popitem(last=False)

