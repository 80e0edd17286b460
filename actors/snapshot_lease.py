"""The Bookie's snapshot lease: it keeps ``leases/snapshots-<epoch>`` up to date, so that GC in
any process knows which manifest versions this writer's snapshots and reads may still use (see
:mod:`leveled_ray.manifest.snapshot_leases` for the rule)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..errors import ObjectStoreError
from ..files.names import LEASE_PREFIX, lease_epoch_of, snapshot_lease_name
from ..files.store import ObjectStore
from ..manifest import snapshot_leases as sl
from ..options import Options

log = logging.getLogger(__name__)

#: How often the floor is compared with the one last written (a cheap min over a few ints).
#: A lease written late only makes GC keep files a little longer: a new snapshot reads the
#: current view, which the written floors already cover, and each write holds the floors and
#: the snapshots together.
CHECK_S = 1.0


class LeasePublisher:
    """Writes this writer's lease: at start, whenever its floors (``floors()``: per kind, the
    oldest version its views and running reads use) or its snapshots' versions change, at
    least every ``lease_renew_s``, and as a closed lease at close. Each lease says when the
    oldest of the writer's uploads in flight began (``uploads()``), or else when it was
    written, in wall time; a closed one, when the oldest bulk write still pending began.
    Snapshots are recorded with :meth:`register` and :meth:`release`, beside their
    registration with the owners, with the same timeouts."""

    def __init__(self, store: ObjectStore, options: Options, epoch: int,
                 floors: Callable[[], tuple[int, int]], clock: Callable[[], float],
                 uploads: Callable[[], float | None] = lambda: None):
        self.store, self.options, self.epoch = store, options, epoch
        self.clock = clock
        self._floors = floors
        self._uploads = uploads
        #: id -> (sst version, journal version, journal slots below, expiry)
        self.snapshots: dict[str, tuple[int, int, int, float]] = {}
        self.name = snapshot_lease_name(epoch)
        self.written: sl.SnapshotLease | None = None
        self.legacy = (-1, 0.0)
        self._lock = asyncio.Lock()
        self.counters = {"lease_writes": 0, "lease_failures": 0}

    def register(self, snapshot_id: str, pin: tuple[int, int, int], timeout_s: float) -> None:
        """Record a snapshot: its ``(sst version, journal version, journal slots below)``."""
        self.snapshots[snapshot_id] = (*pin, self.clock() + timeout_s)

    def release(self, snapshot_id: str) -> None:
        self.snapshots.pop(snapshot_id, None)

    def _live(self) -> tuple[tuple[int, int, int, float], ...]:
        now = self.clock()
        self.snapshots = {k: s for k, s in self.snapshots.items() if s[3] > now}
        return sl.snapshot_versions(self.snapshots.values())

    def _state(self) -> tuple:
        """What a new lease would say, but for the times."""
        return self._floors(), {s[:3] for s in self._live()}

    def _written_state(self) -> tuple | None:
        w = self.written
        return None if w is None else (w.floors, {s[:3] for s in w.snapshots})

    async def start(self, start_version: int) -> None:
        """Write the first lease, before any snapshot can be taken. If earlier writers left no
        lease at all, they had none: their snapshots may read any version older than this
        writer's first one, for as long as the longest snapshot timeout (the legacy window)."""
        epochs = [lease_epoch_of(m.path) for m in await self.store.list_async(LEASE_PREFIX)]
        earlier = [e for e in epochs if e is not None and e < self.epoch]
        if self.epoch > 1 and not earlier:
            self.legacy = (start_version, self.clock() + self.options.gc.long_snapshot_timeout_s)
        await self.write()

    async def write(self, closed: bool = False) -> sl.SnapshotLease:
        async with self._lock:
            uploading, wall = self._uploads(), time.time()
            lease = sl.SnapshotLease(
                epoch=self.epoch, written_at=self.clock(),
                renew_s=self.options.gc.lease_renew_s,
                max_timeout_s=self.options.gc.long_snapshot_timeout_s, floors=self._floors(),
                closed=closed, snapshots=self._live(),
                legacy_below=self.legacy[0], legacy_until=self.legacy[1],
                publish_s=self.options.gc.publish_window_s,
                uploads_since=(uploading if closed else wall if uploading is None
                               else min(uploading, wall)))
            await self.store.put_async(self.name, sl.encode(lease))
            self.written = lease
            self.counters["lease_writes"] += 1
            return lease

    async def close(self) -> None:
        """Write the closed lease. If the object store refuses, the open lease stays: it keeps
        more than needed until it goes stale, never less."""
        try:
            await self.write(closed=True)
        except ObjectStoreError:
            self.counters["lease_failures"] += 1
            log.warning("the closed snapshot lease could not be written", exc_info=True)

    async def flush(self) -> None:
        """Write the lease now if it no longer says what the writer uses."""
        if self._state() != self._written_state():
            await self.write()

    async def ensure_fresh(self) -> None:
        """Before a snapshot is handed out: a lease GC may soon take as stale is renewed first
        (raising the object store's error if it cannot be)."""
        if self.written is None or self.clock() > (self.written.written_at
                                                   + (sl.STALE_RENEWALS - 1)
                                                   * self.options.gc.lease_renew_s):
            await self.write()

    async def run(self) -> None:
        """Renew every ``lease_renew_s``, and within ``CHECK_S`` when the floor moves."""
        while True:
            await asyncio.sleep(CHECK_S)
            due = (self._state() != self._written_state()
                   or self.clock() >= self.written.written_at + self.options.gc.lease_renew_s)
            if not due:
                continue
            try:
                await self.write()
            except Exception:  # the next check tries again; snapshots wait for a fresh lease
                self.counters["lease_failures"] += 1
                log.warning("the snapshot lease could not be renewed", exc_info=True)

    def stats(self) -> dict:
        written = self.written
        return {"floors": None if written is None else dict(zip(sl.KINDS, written.floors)),
                "written_at": None if written is None else written.written_at,
                "snapshots": len(self.snapshots), **self.counters}
