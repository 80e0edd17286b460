"""``listen()`` on a sharded store: one :class:`~leveled_ray.client.listen.Listener` per shard,
read as one. Each shard's changes come in its SQN order and each carries its ``shard``; the
position is ``{"0": sqn, "1": sqn, ...}`` (see :mod:`leveled_ray.read.changes`), JSON as it is.

A poll waits on every shard at once and returns what the first shards to answer have; shards
still waiting keep their call for the next poll, so no shard's change waits for another's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

import pyarrow as pa

from ..client.listen import Listener, Polling
from ..files.sync import with_sync_twins
from ..read.changes import Change, shard_positions


@with_sync_twins
class ShardedListener(Polling):
    """See the module docstring; the same interface as
    :class:`~leveled_ray.client.listen.Listener`, with a position for :attr:`sqn`."""

    def __init__(self, stores, after, *, name: str | None, lifetime: float, values: bool,
                 batch_size: int, labels=None):
        self.labels = tuple(labels or (str(s) for s in range(len(stores))))
        afters = shard_positions(after, self.labels)
        self.parts = [Listener(store, a, name=None if name is None else f"{name}.{s}",
                               lifetime=lifetime, values=values, batch_size=batch_size)
                      for s, (store, a) in enumerate(zip(stores, afters))]
        self._waiting: dict[int, asyncio.Task] = {}
        self._items: deque[Change] = deque()

    @property
    def sqn(self) -> dict[str, int]:
        """The position after every change handed out so far."""
        return {label: part.sqn for label, part in zip(self.labels, self.parts)}

    async def _poll_parts(self, timeout: float | None, arrow: bool) -> list:
        for s, part in enumerate(self.parts):
            if s not in self._waiting:
                poll = part.poll_batch_async if arrow else part._fetch_async
                self._waiting[s] = asyncio.ensure_future(poll(timeout))
        done, _ = await asyncio.wait(self._waiting.values(), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        found = []
        for s in sorted(s for s, task in self._waiting.items() if task in done):
            got = self._waiting.pop(s).result()
            if arrow and got is not None:
                found.append(got.append_column("shard", pa.array([s] * got.num_rows,
                                                                  pa.int32())))
            elif not arrow:
                found += [c._replace(shard=s) for c in got]
        return found

    async def _fetch_async(self, timeout: float | None) -> list[Change]:
        """The next changes of whichever shards have some (``[]`` after ``timeout``); a
        shard's position moves past one only once it is handed out."""
        while True:
            found = await self._poll_parts(timeout, False)
            if found or timeout is not None:
                return found

    def _hand_out(self, change: Change) -> Change:
        self.parts[change.shard]._hand_out(change)
        return change

    async def poll_batch_async(self, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next changes as one Arrow batch with a ``shard`` column (``None`` after
        ``timeout``)."""
        while True:
            found = await self._poll_parts(timeout, True)
            if found:
                return pa.Table.from_batches(found).combine_chunks().to_batches()[0]
            if timeout is not None:
                return None

    async def close_async(self) -> None:
        for task in self._waiting.values():
            task.cancel()
        for task in self._waiting.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._waiting.clear()
        await asyncio.gather(*(part.close_async() for part in self.parts))
