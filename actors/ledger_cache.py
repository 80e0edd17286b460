"""The Bookie's Ledger cache: recent changes not yet in an SST, and the pusher that sends them
to the Penciller.

A change passes through three stages here:

- *pending*: admitted and given an SQN, its journal file not yet durable. Conditions and index
  resolution of later writes see it; reads do not.
- *cached*: durable. Reads find its entries here until the Penciller reports them persisted
  in an SST (:meth:`LedgerCache.drop_persisted`).
- *unpushed*, then *pushed*: the entries go to the Penciller's L0 memory in batches, in SQN
  order; a snapshot references the pushed batches that the Ledger's files do not hold yet.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

import pyarrow as pa
from sortedcontainers import SortedDict

from ..codec import TAG_OBJECT, LedgerRows
from ..options import Options
from .remote import wait_set


class LedgerCache:
    """Recent Ledger changes of one Bookie (see the module docstring). Plain state: the
    Bookie calls it with no await in between where it needs a consistent picture."""

    def __init__(self, push_keys: int):
        self.push_keys = push_keys
        self.entries: SortedDict = SortedDict()  # ledger key -> entry, not yet in an SST
        self.log: deque[tuple[int, bytes]] = deque()  # (sqn, key) of the entries, SQN order
        self.pending: dict[bytes, tuple] = {}  # object key -> its entry, not yet durable
        self.unpushed = LedgerRows()
        #: Batches pushed and not yet in an SST, as ``(SQN pushed up to, batch)``: with the
        #: unpushed rows, every change the Ledger files lack, in SQN order.
        self.pushed: deque[tuple[int, pa.RecordBatch]] = deque()
        self.wake_pusher = asyncio.Event()
        self._pusher_idle = False  # the pusher waits for a change, with no timer
        self.persisted = asyncio.Event()  # set whenever the Ledger's files take entries
        self._push_lock = asyncio.Lock()  # one push in flight keeps pushes in SQN order

    def get(self, lkey: bytes) -> tuple | None:
        """The cached (durable) entry of a key: what reads see before the Ledger's files."""
        return self.entries.get(lkey)

    @property
    def backlog(self) -> int:
        """Entries not yet persisted in an SST: they live in this process."""
        return len(self.log)

    def holds_index_entries(self) -> bool:
        return bool(self.entries) and self.entries.keys()[0] < TAG_OBJECT

    # -- pending changes ---

    def known_entry(self, lkey: bytes, stored: dict) -> tuple | None:
        """The newest entry a write must see for a key: pending, else cached, else the one
        read from the Ledger's files into ``stored``."""
        entry = self.pending.get(lkey)
        if entry is None:
            entry = self.entries.get(lkey)
        return stored.get(lkey) if entry is None else entry

    def add_pending(self, lkeys: Iterable[bytes], entries: Iterable[tuple]) -> None:
        self.pending.update(zip(lkeys, entries))

    def release_pending(self, lkeys: Iterable[bytes], sqns: Iterable[int]) -> None:
        """Forget pending changes, unless a later change to the key is pending."""
        pending, missing = self.pending, (None,)
        done = [k for k, sqn in zip(lkeys, sqns) if pending.get(k, missing)[0] == sqn]
        for lkey in done:
            del pending[lkey]

    # -- durable changes ---

    def add_durable(self, rows: LedgerRows) -> None:
        """Durable changes: readable here, and queued for the Penciller."""
        if not len(rows):
            return
        self.entries.update(rows.entries())
        self.log.extend(zip(rows.sqn, rows.key))
        for name in LedgerRows.__slots__:
            getattr(self.unpushed, name).extend(getattr(rows, name))
        if self._pusher_idle or len(self.unpushed) >= self.push_keys:
            self.wake_pusher.set()  # a change starts an idle pusher's interval

    def drop_persisted(self, persisted_sqn: int) -> None:
        """The Ledger's files now hold every change up to ``persisted_sqn``."""
        while self.pushed and self.pushed[0][0] <= persisted_sqn:
            self.pushed.popleft()
        log, entries = self.log, self.entries
        while log and log[0][0] <= persisted_sqn:
            sqn, lkey = log.popleft()
            entry = entries.get(lkey)
            if entry is not None and entry.sqn == sqn:
                del entries[lkey]
        self.persisted.set()

    async def backpressure(self, options: Options, stopping: Callable[[], bool]) -> int | None:
        """Slow a writer down while the Ledger falls behind (leveled #402): entries not yet in
        an SST live in this process, so their number must stay bounded. A delay in proportion
        to the backlog above half of ``max_unpersisted_keys`` (at most ``max_write_delay_ms``),
        and a wait for the Penciller at the limit. Returns the milliseconds waited, or
        ``None`` if the writer was not slowed."""
        limit = options.ledger.max_unpersisted_keys
        if self.backlog < limit // 2:
            return None
        started = time.monotonic()
        if self.backlog < limit:
            share = (self.backlog - limit // 2) / max(1, limit - limit // 2)
            await asyncio.sleep(options.ledger.max_write_delay_ms / 1000.0 * share)
        while self.backlog >= limit and not stopping():
            self.wake_pusher.set()  # make sure everything reached the Penciller
            self.persisted.clear()
            await self.persisted.wait()
        return round((time.monotonic() - started) * 1000)

    def overlay_batches(self) -> list[pa.RecordBatch]:
        """Every change the Ledger's files lack, as Arrow batches in SQN order (for a
        snapshot: references to immutable batches, not a copy)."""
        batches = [b for _, b in self.pushed]
        if len(self.unpushed):
            batches.append(self.unpushed.to_batch())
        return batches

    def cached_rows(self, lo: bytes, hi: bytes) -> LedgerRows:
        """The cached entries with keys in ``[lo, hi)``."""
        return LedgerRows.from_entries(
            (k, self.entries[k]) for k in self.entries.irange(lo, hi, inclusive=(True, False)))

    # -- pushing to the Penciller ---

    async def push(self, durable_sqn: Callable[[], int],
                   send: Callable[[pa.RecordBatch, int], Awaitable]) -> None:
        """Send the unpushed rows, every change up to SQN ``durable_sqn()``, with ``send``."""
        async with self._push_lock:
            rows, upto = self.unpushed, durable_sqn()
            self.unpushed = LedgerRows()
            batch = rows.to_batch()
            self.pushed.append((upto, batch))  # until persisted: what snapshots reference
            await send(batch, upto)

    async def run_pusher(self, durable_sqn: Callable[[], int],
                         send: Callable[[pa.RecordBatch, int], Awaitable], interval_s: float,
                         stopping: Callable[[], bool]) -> None:
        """Push every ``push_keys`` changes or ``interval_s``, until ``stopping()``. Never
        cancelled mid-push (a cancelled push would lose its changes while a later push moved
        the persisted SQN past them): the owner stops it by flag and waits. An error ends it:
        the changes stay in the Journal, and reopening replays them."""
        while not stopping():
            if not len(self.unpushed):  # idle: no timer runs until a change comes
                self.wake_pusher.clear()
                self._pusher_idle = True
                try:
                    await self.wake_pusher.wait()
                finally:
                    self._pusher_idle = False
                self.wake_pusher.clear()  # that change starts the interval, it is not pushed alone
                continue
            await wait_set(self.wake_pusher, interval_s)
            self.wake_pusher.clear()
            if len(self.unpushed):
                await self.push(durable_sqn, send)
