"""Admitting writes: a ``put_many`` is checked, given SQNs and queued for group commit, and
a bulk write's files are installed between two groups.

A write is admitted in one step with no await from its checks to its SQNs: its conditions are
checked and its index changes resolved against every change before it, durable or still
pending (see :mod:`.ledger_cache`), so no other change can slip in between. Writers are slowed
while the Ledger falls behind, and wait while an earlier write's outcome is being settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import repeat

from ..codec import (
    NO_CONDITION,
    OP_PUT,
    PACKED_EXTRA,
    Change,
    LedgerRows,
    holds_index_entries,
)
from ..codec.conditions import check_parts
from ..codec.index_terms import change_entry, resolve_all
from ..errors import InvalidArgumentError
from ..files.journal import JournalInfo
from ..files.sst import SstInfo
from ..manifest.ingest import WINDOW_SQNS, check_install_order, reserve_base
from ..options import Options
from ..read.views import LedgerFiles
from .group_commit import Group, GroupCommit, JournalColumns
from .ledger_cache import LedgerCache
from .live_view import LiveView
from .metrics import Observations
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


class WritePath:
    """The Bookie's writes. ``check_usable()`` raises if writes are refused (close, fencing);
    ``stopping()`` says whether the store is closing or stopped. The journal-writing functions
    are those of :class:`~.group_commit.GroupCommit`."""

    def __init__(self, options: Options, cache: LedgerCache, view: LiveView, *,
                 head_only: str | None, check_usable: Callable[[], None],
                 stopping: Callable[[], bool], write, settle, stopped, closing,
                 observations: Observations):
        self.options, self.cache, self.view, self.head_only = options, cache, view, head_only
        self.check_usable, self.stopping = check_usable, stopping
        self.writer = GroupCommit(
            options, write=write, settle=settle, durable=self._durable,
            release=lambda g: cache.release_pending(g.keys, g.sqns), stopped=stopped,
            closing=closing)
        self.next_sqn = 1
        self.durable_sqn = 0
        #: Whether any object may hold index terms: then every change is resolved against
        #: the object's current entry (see :mod:`leveled_ray.codec.index_terms`).
        self.indexed = False
        # Closed while a bulk write is installed: no change gets an SQN meanwhile.
        self.writes_open = asyncio.Event()
        self.writes_open.set()
        self._install_lock = asyncio.Lock()
        self.reserved_upto = 0  # end of the SQN windows reserved for bulk writes
        self.observations = observations
        self.counters = {"changes": 0, "put_bytes": 0, "throttled_writes": 0, "throttle_ms": 0}

    async def put_many(self, changes: list[Change], values: ValueBatch) -> list[int]:
        """Write changes as one atomic, durable group; returns their SQNs in order."""
        if not changes:
            return []
        (first,) = await self.put_parts(changes, [len(changes)], values)
        if isinstance(first, Exception):
            raise first
        return list(range(first, first + len(changes)))

    async def put_parts(self, changes: list[Change], counts: list[int],
                        values: ValueBatch) -> list[int | Exception]:
        """Write several callers' parts (``counts`` changes each, in order) in one step. Each
        part's conditions are checked on its own; the parts that pass are written as one
        durable group. Returns each part's first SQN, or the error of that part alone."""
        if self.head_only and any(c.op == OP_PUT and c.extra[:1] != PACKED_EXTRA
                                  for c in changes):
            raise InvalidArgumentError("this store is head_only: write to it through a "
                                       "handle that knows (lr.open(..., head_only=...))")
        conditional = [c.lkey for c in changes if c.condition != NO_CONDITION]
        await self.writer.wait_settled()
        self.check_usable()
        while True:
            await self.writes_open.wait()
            await self._backpressure()
            stored: dict[bytes, tuple | None] = {}
            if conditional or self.indexed:
                stored = await self.view.current_entries(
                    {c.lkey for c in changes} if self.indexed else set(conditional))
                self.check_usable()
            if self.writes_open.is_set():
                break  # else a bulk write is being installed: look again after it
        # From here to the allocation nothing awaits, so no other change can slip in.
        now_s = self.view.clock()
        known = lambda k: self.cache.known_entry(k, stored)  # noqa: E731
        failures: list = [None] * len(counts)
        if conditional:
            failures = check_parts(changes, counts, known, self.next_sqn, now_s)
            if all(failures):
                return failures  # nothing to write
            if any(failures):
                changes, values = passed(changes, counts, failures, values)
        if self.indexed or any(c.indexes for c in changes):
            changes = resolve_all(changes, known, now_s)
            self.indexed = True
        group = self._allocate(changes, values)
        await group.future
        results, sqn = [], group.sqns.start
        for count, failure in zip(counts, failures):
            results.append(failure or sqn)
            sqn += 0 if failure else count
        return results

    async def _backpressure(self) -> None:
        waited_ms = await self.cache.backpressure(self.options, self.stopping)
        if waited_ms is not None:
            self.counters["throttled_writes"] += 1
            self.counters["throttle_ms"] += waited_ms
            self.check_usable()

    def _allocate(self, changes: list[Change], values: ValueBatch) -> Group:
        """Give the changes SQNs and queue them for the next journal file."""
        lm = int(self.view.clock() * 1000)
        first = self.next_sqn
        self.next_sqn += len(changes)
        sqns = range(first, first + len(changes))
        # Work on columns: transposing the tuples and zipping columns runs in C.
        ops, lkeys, sizes, hashes, indexes, expiries, extras, _ = zip(*changes)
        rows = LedgerRows.from_changes(sqns, ops, lkeys, sizes, hashes, indexes, expiries,
                                       extras, lm)
        self.cache.add_pending(lkeys, map(change_entry, changes, sqns, repeat(lm)))
        group = Group(sqns, JournalColumns(first, lm, ops, lkeys, indexes, expiries, extras),
                      values, rows, sum(sizes) + sum(map(len, lkeys)))
        self.writer.add(group)
        return group

    def _durable(self, groups: list[Group], info: JournalInfo) -> None:
        """Groups are durable: make them visible and queue their Ledger changes."""
        self.view.journal.extend([info])
        self.observations.add("leveled_group_commit_changes",
                              sum(len(g.sqns) for g in groups))
        for group in groups:
            self.cache.add_durable(group.rows)
            self.view.remember_values(group.sqns, group.values.resolved, group.nbytes)
            self.cache.release_pending(group.keys, group.sqns)
            self.durable_sqn = max(self.durable_sqn, group.sqns[-1])
            self.counters["changes"] += len(group.sqns)
            self.counters["put_bytes"] += group.nbytes

    # -- bulk writes (see leveled_ray.bulk.write) ---

    def reserve_bulk(self) -> int:
        """Reserve a window of SQNs for a bulk write, above every SQN given out so far."""
        self.check_usable()
        base = reserve_base(self.next_sqn - 1, self.reserved_upto)
        self.reserved_upto = base + WINDOW_SQNS
        return base

    async def install(self, journal: list[JournalInfo], ssts: list[SstInfo],
                      install: Callable[[], Awaitable[LedgerFiles]]) -> LedgerFiles:
        """Install a bulk write's files with ``install()``, between two groups: writes pause
        until every admitted change is durable, and resume once the files are in."""
        async with self._install_lock:
            self.writes_open.clear()
            try:
                await self.writer.idle.wait()
                self.check_usable()
                check_install_order(journal, self.next_sqn)
                files = await install()
                self.view.journal.extend(journal)
                top = max(j.max_sqn for j in journal)
                self.next_sqn = max(self.next_sqn, top + 1)
                self.durable_sqn = max(self.durable_sqn, top)
                self.indexed = self.indexed or holds_index_entries(s.min_key for s in ssts)
                return files
            finally:
                self.writes_open.set()
