"""The newest acknowledged changes, kept in the Bookie's memory for listeners.

``store.listen()`` must see each change as soon as it is acknowledged, in SQN order, with no
gap. Reading each new journal file back from the object store would cost a request and a
snapshot per wake-up; instead the Bookie keeps the groups it has just made durable (their
journal columns and values, as the Inker wrote them) up to a byte bound, and answers a
listener from them in one round trip.

The tail covers exactly the SQNs in ``(floor, top]``. A listener behind ``floor`` reads the
Journal (a snapshot's :func:`~leveled_ray.read.changes.journal_changes`) up to a top it then
asks the tail from. A bulk write's install moves ``floor`` (its rows are only in its files).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import NamedTuple

import pyarrow as pa

from ..files import journal as jfmt
from .group_commit import Group, JournalColumns


class _Kept(NamedTuple):
    """What the tail keeps of a group: its journal columns and values."""

    sqns: range
    records: JournalColumns
    values: list
    nbytes: int


class ChangeTail:
    """Recent groups, oldest first, holding at most ``max_bytes`` of keys and values (the
    newest group is always kept)."""

    def __init__(self, max_bytes: int, top: int = 0):
        self.max_bytes = max_bytes
        self.floor = self.top = top
        self.groups: deque[_Kept] = deque()
        self.nbytes = 0
        self._changed = asyncio.Event()

    def add(self, group: Group) -> None:
        """A group is durable (groups arrive in SQN order)."""
        self.groups.append(_Kept(group.sqns, group.records, group.values.resolved,
                                 group.nbytes))
        self.nbytes += group.nbytes
        self.top = group.sqns[-1]
        while self.nbytes > self.max_bytes and len(self.groups) > 1:
            gone = self.groups.popleft()
            self.nbytes -= gone.nbytes
            self.floor = gone.sqns[-1]
        self._wake()

    def jump(self, top: int) -> None:
        """Changes up to ``top`` became visible without passing through here (a bulk write's
        files): listeners below it read the Journal."""
        self.groups.clear()
        self.nbytes = 0
        self.floor = self.top = max(self.top, top)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def covers(self, after: int) -> bool:
        return after >= self.floor

    def rows_after(self, after: int, max_rows: int) -> pa.Table:
        """Journal rows (:data:`~leveled_ray.files.journal.JOURNAL_SCHEMA`) of the changes
        after ``after`` (which the tail covers), at most ``max_rows``, in SQN order."""
        records: list = []
        for group in self.groups:
            if group.sqns[-1] <= after:
                continue
            first, lm, ops, lkeys, indexes, expiries, extras, tag = group.records
            rows = zip(group.sqns, ops, lkeys, group.values, indexes, expiries, extras,
                       itertools.repeat(lm), itertools.repeat(tag))
            records += (r for r in rows if r[0] > after)
            if len(records) >= max_rows:
                break
        return jfmt.records_table(records[:max_rows])

    async def wait_after(self, after: int, timeout: float) -> bool:
        """Wait until some change after ``after`` is here (or ``timeout`` passes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.top <= after:
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass
        return True

    def stats(self) -> dict:
        return {"floor": self.floor, "top": self.top, "groups": len(self.groups),
                "bytes": self.nbytes}
