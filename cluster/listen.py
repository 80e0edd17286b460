"""``listen()`` on a sharded store: one :class:`~leveled_ray.client.listen.Listener` per shard,
read as one. Each shard's changes come in its SQN order and each carries its ``shard``; the
position is ``{"0": sqn, "1": sqn, ...}`` (see :mod:`leveled_ray.read.changes`), JSON as it is.

A poll waits on every shard at once and returns what the first shards to answer have; shards
still waiting keep their call for the next poll, so no shard's change waits for another's.

It follows its handle's layout: when a split or a move closes a shard's Bookie under it, it
listens again to the new layout's shards from its position (a child reads on from its
parent's SQN: see :func:`~leveled_ray.manifest.shard_map.position_sqns`). Changes fetched
and not yet handed out are fetched again, so none is lost or handed out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import pyarrow as pa

from ..client.listen import Listener, Polling
from ..errors import StoreClosedError, WrongShardError
from ..files.sync import with_sync_twins
from ..read.changes import Change, shard_positions
from .redirect import followed


@with_sync_twins
class ShardedListener(Polling):
    """See the module docstring; the same interface as
    :class:`~leveled_ray.client.listen.Listener`, with a position for :attr:`sqn`."""

    def __init__(self, owner, after, *, name: str | None, lifetime: float, values: bool,
                 batch_size: int):
        self.owner = owner  # the sharded handle, whose layout it follows
        self._options = {"lifetime": lifetime, "values": values, "batch_size": batch_size}
        self._name = name
        self._waiting: dict[int, asyncio.Task] = {}
        self._items: deque[Change] = deque()
        #: A shard's error that may mean the layout moved on (see :meth:`_follow`).
        self._moved: BaseException | None = None
        self._listen(owner._layout, after)

    def _listen(self, layout, after) -> None:
        """One listener per shard of ``layout``, from position ``after``."""
        self._layout = layout
        self.labels = layout.shard_map.labels
        afters = shard_positions(after, self.labels)
        # Each shard's lease under the listener's name: a split's children inherit it.
        self.parts = [Listener(store, a, name=self._name, **self._options)
                      for store, a in zip(layout.stores, afters)]

    async def _follow(self, exc: BaseException) -> None:
        """A shard's call failed with ``exc``: if its handle's layout moved on (a split or
        a move), listen to the new one from the position handed out; else raise ``exc``."""
        if not followed(exc) or not await self.owner._follow(self._layout):
            raise exc
        position, old = self.sqn, self.parts
        await self._stop_waiting()
        self._listen(self.owner._layout, position)
        for part in old:  # their Bookies are closed: their leases end with them
            with contextlib.suppress(Exception):
                await part.close_async()

    @property
    def sqn(self) -> dict[str, int]:
        """The position after every change handed out so far."""
        return {label: part.sqn for label, part in zip(self.labels, self.parts)}

    async def _poll_parts(self, timeout: float | None, arrow: bool) -> list:
        if self._moved is not None:  # what came before it was handed out: follow now
            moved, self._moved = self._moved, None
            await self._follow(moved)
        for s, part in enumerate(self.parts):
            if s not in self._waiting:
                poll = part.poll_batch_async if arrow else part._fetch_async
                self._waiting[s] = asyncio.ensure_future(poll(timeout))
        done, _ = await asyncio.wait(self._waiting.values(), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        found = []
        for s in sorted(s for s, task in self._waiting.items() if task in done):
            try:
                got = self._waiting.pop(s).result()
            except (StoreClosedError, WrongShardError) as exc:
                self._moved = exc  # followed at the next poll, once these are handed out
                continue
            if arrow and got is not None:
                found.append(got.append_column("shard", pa.array([s] * got.num_rows,
                                                                  pa.int32())))
            elif not arrow:
                found += [c._replace(shard=s) for c in got]
        return found

    async def _fetch_async(self, timeout: float | None) -> list[Change]:
        """The next changes of whichever shards have some (``[]`` after ``timeout``); a
        shard's position moves past one only once it is handed out."""
        deadline = _deadline(timeout)
        while True:
            found = await self._poll_parts(_left(deadline), False)
            if found or _past(deadline) and self._moved is None:
                return found

    def _hand_out(self, change: Change) -> Change:
        self.parts[change.shard]._hand_out(change)
        return change

    async def poll_batch_async(self, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next changes as one Arrow batch with a ``shard`` column (``None`` after
        ``timeout``)."""
        deadline = _deadline(timeout)
        while True:
            found = await self._poll_parts(_left(deadline), True)
            if found:
                return pa.Table.from_batches(found).combine_chunks().to_batches()[0]
            if _past(deadline) and self._moved is None:
                return None

    async def _stop_waiting(self) -> None:
        for task in self._waiting.values():
            task.cancel()
        for task in self._waiting.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._waiting.clear()

    async def close_async(self) -> None:
        await self._stop_waiting()
        await asyncio.gather(*(part.close_async() for part in self.parts))


# A poll's time: a shard's call kept from an earlier poll may come back empty at once, so a
# poll goes on waiting until its own timeout has passed.
def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
