"""Group commit: the changes of each ``put_many`` call wait as a :class:`Group`, and the
:class:`GroupCommit` writer turns everything queued while the last journal write was in flight
into the next journal file.

A group is admitted with its conditions checked and its index changes resolved against every
change before it, durable or still queued. When a journal write fails for sure, the groups
queued behind it that touch none of its keys are unaffected and are written as they are; a
group that touches one of its keys was checked against a change that never happened, so it
fails too, definitely, having never been sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ..codec import LedgerRows
from ..errors import FencedError, ObjectStoreError, StoreClosedError
from ..files.journal import JournalInfo
from ..files.outcomes import RetryPolicy
from ..options import Options
from .remote import ValueBatch, wait_set


class JournalColumns(NamedTuple):
    """A group's journal records as columns, without values (the Inker adds them)."""

    first_sqn: int
    last_modified: int
    ops: tuple
    keys: tuple
    indexes: tuple
    expiries: tuple
    extras: tuple
    batch: bytes | None = None  # the cross-shard batch these changes are part of


@dataclass
class Group:
    """One caller's changes, waiting for their journal file to be durable."""

    sqns: range
    records: JournalColumns
    values: ValueBatch
    rows: LedgerRows
    nbytes: int
    future: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    #: Keys its transactions checked without writing them: it depends on them as much.
    checked: frozenset[bytes] = frozenset()

    @property
    def keys(self) -> tuple[bytes, ...]:
        return self.records.keys


def split_queue(failed: Iterable[Group], queued: Iterable[Group]) -> tuple[list[Group],
                                                                             list[Group]]:
    """``(still to write, to fail)``: the queued groups, in order, that touch (write or
    check) no key written by a failed group or by a queued group failed before them, and the
    rest."""
    touched: set[bytes] = set()
    for group in failed:
        touched.update(group.keys)
    keep, drop = [], []
    for group in queued:
        if touched.isdisjoint(group.keys) and touched.isdisjoint(group.checked):
            keep.append(group)
        else:
            drop.append(group)
            touched.update(group.keys)
    return keep, drop


class Journal(Protocol):
    """Where groups are written: the Inker."""

    async def append(self, columns: list, values: list) -> JournalInfo:
        """Write the groups' records and values as one journal file, durably."""

    async def settle(self) -> JournalInfo | None:
        """Settle a write in doubt: its file if written; a definite
        :class:`ObjectStoreError` if its slot was sealed."""


class CommitOwner(Protocol):
    """What the writer tells its owner, the Bookie's write path
    (:class:`~.write_path.WritePath`)."""

    def durable(self, groups: list[Group], info: JournalInfo) -> None:
        """Groups are durable: make them visible (before they are acknowledged)."""

    def release(self, group: Group) -> None:
        """Forget a failed group's pending changes."""

    def stopped(self, exc: BaseException) -> None:
        """Nothing more can be written (fencing, close, a lost Inker)."""

    #: Whether the store is closing: a write in doubt is then settled for a bounded time.
    closing: bool


class GroupCommit:
    """The queue of admitted groups and the journal writer that drains it (:meth:`run`): one
    journal file for everything queued while the last one was written, with what a failed
    write, or one of unknown outcome, does to the queue. What it learns goes to its
    ``owner``."""

    def __init__(self, options: Options, owner: CommitOwner):
        self.options, self.owner = options, owner
        self.queue: deque[Group] = deque()
        self.queued_bytes = 0
        #: Groups whose journal write had an unknown outcome: settled (resent or sealed)
        #: before anything else is written; until then new writes wait, boundedly.
        self.in_doubt: list[Group] = []
        self.settled = asyncio.Event()
        self.settled.set()
        self.idle = asyncio.Event()  # nothing queued or being written
        self.idle.set()
        self._wake = asyncio.Event()
        self.counters = {"groups": 0, "in_doubt_groups": 0}

    def add(self, group: Group) -> None:
        self.queue.append(group)
        self.queued_bytes += group.nbytes
        self.idle.clear()
        self._wake.set()

    async def wait_settled(self) -> None:
        """While an earlier write's outcome is being settled (the object store does not
        answer), wait for it, at most ``write_resolve_s``; then fail, definitely: nothing was
        sent."""
        resolve_s = self.options.object_store.write_resolve_s
        if self.in_doubt and not await wait_set(self.settled, resolve_s):
            raise ObjectStoreError(
                f"not written: the object store has not answered for {resolve_s:g}s, and an "
                "earlier write is being settled", definite=True)

    def _take(self) -> list[Group]:
        """The next journal file's groups: at least one, up to the file's size limits."""
        taken, size = [], 0
        while self.queue and (not taken or (
            size + self.queue[0].nbytes <= self.options.journal.max_file_bytes
            and size < self.options.journal.flush_bytes
        )):
            group = self.queue.popleft()
            taken.append(group)
            size += group.nbytes
        self.queued_bytes -= size
        return taken

    async def run(self, journal: Journal) -> None:
        """The journal writer loop, writing to ``journal``."""
        while True:
            if self.in_doubt:
                await self._settle(journal)
                continue
            if not self.queue:
                self.idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            flush_s = self.options.journal.flush_ms / 1000.0
            if flush_s and self.queued_bytes < self.options.journal.flush_bytes:
                await asyncio.sleep(flush_s)
            taken = self._take()
            try:
                info = await journal.append([g.records for g in taken],
                                            [g.values for g in taken])
            except ObjectStoreError as exc:
                if exc.definite:
                    self.fail_groups(taken, exc)
                else:
                    self._doubt(taken, exc)
                continue
            except (FencedError, StoreClosedError, asyncio.CancelledError) as exc:
                self.stop(taken, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            except Exception as exc:  # nothing was written: these groups fail, not the store
                self.fail_groups(taken, exc)
                continue
            self._done(taken, info)

    def _done(self, groups: list[Group], info) -> None:
        self.owner.durable(groups, info)
        self.counters["groups"] += 1
        for group in groups:
            if not group.future.done():
                group.future.set_result(list(group.sqns))

    def fail_groups(self, failed: list[Group], exc: Exception) -> None:
        """A journal write failed for sure: its groups fail with ``exc``, and so do the queued
        groups that depend on them (see :func:`split_queue`); the rest stay."""
        keep, dependent = split_queue(failed, self.queue)
        self.queue = deque(keep)
        self.queued_bytes = sum(g.nbytes for g in keep)
        self._fail(failed, exc)
        self._fail(dependent, ObjectStoreError(
            f"not written: it changes a key of an earlier write that failed ({exc})",
            definite=True))

    def _doubt(self, groups: list[Group], exc: ObjectStoreError) -> None:
        """A journal write's outcome is unknown: tell its callers so (``definite=False``), and
        keep its changes pending until the write is settled."""
        self.counters["in_doubt_groups"] += len(groups)
        for group in groups:
            if not group.future.done():
                group.future.set_exception(exc)
        self.in_doubt = groups
        self.settled.clear()

    async def _settle(self, journal: Journal) -> None:
        """Settle the write in doubt, retrying while the store does not answer. Written: its
        changes become visible. Sealed: they never will, and the queued groups that depend on
        them fail. At close, give up after ``write_resolve_s``: the next writer's fence then
        seals the slot."""
        delays = RetryPolicy(backoff_s=0.05, max_backoff_s=2.0).delays()
        started = time.monotonic()
        groups = self.in_doubt
        while True:
            try:
                info = await journal.settle()
                break
            except ObjectStoreError as exc:
                if exc.definite:  # sealed: it was not written
                    info = None
                    break
                if (self.owner.closing and time.monotonic() - started
                        > self.options.object_store.write_resolve_s):
                    self.stop(groups, exc)
                    return
                await asyncio.sleep(next(delays))
            except BaseException as exc:
                self.stop(groups, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
        self.in_doubt = []
        self.settled.set()
        if info is not None:
            self._done(groups, info)
        else:
            self.fail_groups(groups, ObjectStoreError(
                "the write in doubt was sealed: it was not written", definite=True))

    def _fail(self, groups: list[Group], exc: BaseException) -> None:
        for group in groups:
            self.owner.release(group)
            if not group.future.done():
                group.future.set_exception(exc)

    def stop(self, taken: list[Group], exc: BaseException) -> None:
        """Fencing, close, or the loss of the Inker: nothing more can be written."""
        failed = taken + self.in_doubt + list(self.queue)
        self.queue.clear()
        self.queued_bytes = 0
        self.in_doubt = []
        self.settled.set()
        self._fail(failed, exc)
        if not isinstance(exc, asyncio.CancelledError):
            self.owner.stopped(exc)
