"""``store.listen(after)``: a live subscription to a store's changes (persist's ``listen``).

A :class:`Listener` hands out every change after its position once it is acknowledged, in SQN
order, with no gap and no duplicate, and then waits for more. Its position is :attr:`sqn`: the
SQN of the last change it handed out (the ``after`` of a later listener that resumes there).

How it reads:

* while it is behind what the Bookie keeps in memory, from the Journal, through a snapshot
  (:func:`~leveled_ray.read.changes.journal_changes`), a batch at a time;
* then from the Bookie's tail of recent changes (:mod:`leveled_ray.actors.change_tail`): one
  long-polling call answers as soon as a change is acknowledged.

It holds a *history lease* (see :mod:`leveled_ray.manifest.history`) at its position, moved
forward as it goes and renewed every third of ``lifetime``, so journal compaction never drops
a change it has not yet read. A listener that stops renewing (its process died) holds nothing
after ``lifetime`` seconds. Closing an unnamed listener drops its lease; a named one keeps it
until it expires, so a consumer restarting under the same name finds its history still there.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import AsyncIterator

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..files.names import ulid
from ..files.sync import PrivateLoop, with_sync_twins
from ..manifest.history import check_position
from ..options import check_number, check_positive_int
from ..read.changes import Change, changes_batch, journal_changes, python_changes
from .shard_side import ShardSide

#: How long one call to the Bookie waits for a change before the listener looks again.
POLL_S = 5.0
#: A lease is moved (renewed) once this share of its lifetime has passed.
RENEW_AFTER = 1 / 3


class Polling:
    """Iteration, context management and synchronous forms over ``_fetch_async`` (the next
    changes, not yet handed out), ``poll_batch_async`` and ``close_async`` (shared by the
    plain and sharded listeners). A change is *handed out* when iteration yields it or a
    poll returns it, and only then does the position move past it (:meth:`_hand_out`), so a
    position saved after each change resumes at the next one. Synchronous calls share the
    listener's :class:`~leveled_ray.files.sync.PrivateLoop`, where its lease renewal runs
    between them; the subclasses get their twins from
    :func:`~leveled_ray.files.sync.with_sync_twins`."""

    _items: deque

    @functools.cached_property
    def sync_loop(self) -> PrivateLoop:
        return PrivateLoop()

    async def _fetch_async(self, timeout: float | None) -> list[Change]:
        raise NotImplementedError

    def _hand_out(self, change: Change) -> Change:
        raise NotImplementedError

    async def poll_async(self, timeout: float | None = None) -> list[Change]:
        """The next changes (at least one), or ``[]`` if none came within ``timeout``."""
        if self._items:
            items = list(self._items)
            self._items.clear()
        else:
            items = await self._fetch_async(timeout)
        return [self._hand_out(c) for c in items]

    def __aiter__(self):
        return self

    async def __anext__(self) -> Change:
        while not self._items:
            self._items.extend(await self._fetch_async(None))
        return self._hand_out(self._items.popleft())

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close_async()

    def __iter__(self):
        return self

    def __next__(self) -> Change:
        while not self._items:
            self._items.extend(self.sync_loop.run(self._fetch_async(None)))
        return self._hand_out(self._items.popleft())

    def close(self) -> None:
        """Synchronous :meth:`close_async`; it also ends the listener's private loop."""
        try:
            self.sync_loop.run(self.close_async())
        finally:
            self.sync_loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@with_sync_twins
class Listener(Polling):
    """See the module docstring. Iterate it (``for`` or ``async for``), or call
    :meth:`poll` / :meth:`poll_batch` for what is there within a timeout. Use it as a context
    manager, or :meth:`close` it."""

    def __init__(self, store, after: int, *, name: str | None = None, lifetime: float = 60.0,
                 values: bool = True, batch_size: int = 1000):
        check_position(after)
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgumentError(f"name must be a non-empty str, not {name!r}")
        check_number("lifetime", lifetime, minimum=0, inclusive=False)
        self.store = store
        self.sqn = after  # the last change handed out
        self._read = after  # the last change fetched (some may wait in _items)
        self.name = name or f"listen-{ulid()}"
        self.named = name is not None
        self.lifetime = float(lifetime)
        self.values = values
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.closed = False
        self._leased_at: float | None = None  # monotonic time of the last lease move
        self._catchup: AsyncIterator[pa.Table] | None = None
        self._release = None  # ends the catch-up's snapshot
        self._caught_up_to = after  # the SQN of the catch-up's snapshot
        self._items: deque[Change] = deque()

    # -- the async core --

    async def _lease(self, force: bool = False) -> None:
        due = (self._leased_at is None
               or time.monotonic() - self._leased_at >= self.lifetime * RENEW_AFTER)
        if force or due:
            await self.store.set_history_lease_async(self.name, self.sqn, self.lifetime)
            self._leased_at = time.monotonic()

    async def _next_rows(self, timeout: float | None) -> pa.Table | None:
        """Journal rows of the next changes after :attr:`sqn`; ``None`` if none came within
        ``timeout`` (``None``: wait as long as it takes)."""
        if self.closed:
            raise InvalidArgumentError("the listener is closed")
        await self._lease()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._catchup is not None:
                rows = await anext(self._catchup, None)
                if rows is not None:
                    return rows
                # Read to the snapshot's SQN, though the last changes up to it may not be
                # this shard's (a split child's inherited files hold its sibling's too). Every
                # change before it was handed out, so the position moves there too: resuming
                # from it skips nothing, and its lag is measured from there.
                self._read = max(self._read, self._caught_up_to)
                self.sqn = max(self.sqn, self._read)
                await self._end_catchup()
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S,
                                                                deadline - time.monotonic()))
            rows = await ShardSide(self.store).listen_next(self._read, wait,
                                                           self.batch_size)
            if rows is None:  # no longer in the Bookie's memory: read the Journal
                snap = await self.store.snapshot_async(long_running=True)
                self._release = snap.release_async
                self._caught_up_to = snap._view.sqn
                self._catchup = journal_changes(snap._view, self._read, None, self.batch_size)
                continue
            if rows.num_rows:
                return rows
            await self._lease()
            if deadline is not None and time.monotonic() >= deadline:
                return None

    async def _end_catchup(self) -> None:
        catchup, release = self._catchup, self._release
        self._catchup = self._release = None
        try:
            if catchup is not None:
                await catchup.aclose()
        finally:
            if release is not None:
                await release()

    def _fetched(self, rows: pa.Table) -> None:
        self._read = int(rows.column("sqn")[-1].as_py())

    def _hand_out(self, change: Change) -> Change:
        self.sqn = change.sqn
        return change

    async def poll_batch_async(self, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next changes as an Arrow batch (see
        :data:`~leveled_ray.read.changes.CHANGES_SCHEMA`), or ``None`` if none came within
        ``timeout`` seconds."""
        if self._items:
            raise InvalidArgumentError("changes taken by iterating this listener are waiting: "
                                       "iterate on, or use poll_batch alone")
        rows = await self._next_rows(timeout)
        if rows is None:
            return None
        self._fetched(rows)
        self.sqn = self._read  # the whole batch is handed out
        return changes_batch(rows, False, self.values)

    async def _fetch_async(self, timeout: float | None) -> list[Change]:
        rows = await self._next_rows(timeout)
        if rows is None:
            return []
        self._fetched(rows)
        return list(python_changes(rows, self.values))

    async def close_async(self) -> None:
        """Stop listening: an unnamed listener's lease is dropped, a named one's is left to
        expire (or to be taken over by the next listener of that name)."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._end_catchup()
        finally:
            if not self.named and self._leased_at is not None:
                with contextlib.suppress(Exception):  # it expires on its own anyway
                    await self.store.drop_history_lease_async(self.name)
