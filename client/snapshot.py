"""Snapshots: the store as of one moment, readable from any process (leveled's "clones").

``store.snapshot()`` returns a :class:`Snapshot`. Taking one references the Bookie's recent
changes (immutable Arrow batches) and registers with the store's owners; it copies no file.
Reads go straight to the object store from the process that holds the snapshot (or a pickled
copy of it: Ray tasks, Spark executors), so they see exactly the store as of the snapshot,
whatever is written, merged or compacted afterwards.

A snapshot ends with :meth:`Snapshot.release`, at the end of a ``with`` block, or when its
timeout passes (``Options.gc.snapshot_timeout_s``, or ``long_snapshot_timeout_s`` for
``long_running=True``). After that its files may be deleted, so reads raise
:class:`~leveled_ray.errors.SnapshotExpiredError`.
"""

from __future__ import annotations

from .. import roles
from ..errors import InvalidArgumentError, SnapshotExpiredError
from ..files.sync import with_sync_twins
from ..read.history_view import as_of
from ..read.point_in_time import KeyReads, PointInTime
from ..read.queries import Queries


@with_sync_twins
class Snapshot(KeyReads, Queries, roles.SnapshotView):
    """A registered, point-in-time view of a store. Picklable; a context manager.

    Example::

        with store.snapshot() as snap:
            store.put("b", "k", b"new")
            assert snap.get("b", "k") != b"new"      # later writes are invisible
    """

    def __init__(self, view: PointInTime, snapshot_id: str, expires_at: float, values: bool,
                 release=None):
        self._view = view
        self.id = snapshot_id
        self.expires_at = expires_at
        self.values = values
        self._release = release  # only in the original: an async callable taking the id
        self.released = False

    def __reduce__(self):
        # A copy reads the same point in time; only the original releases the registration
        # (a Spark executor finishing its partition must not end the driver's snapshot).
        return (Snapshot, (self._view, self.id, self.expires_at, self.values, None))

    def __repr__(self) -> str:
        return f"Snapshot({self.id!r}, sqn={self.sqn}, expires_at={self.expires_at:.0f})"

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @property
    def sqn(self) -> int:
        """Every change up to this SQN, and none after it, is visible."""
        return self._view.sqn

    def _view_for(self, needs_values: bool) -> PointInTime:
        if self.released or self._view.clock() >= self.expires_at:
            raise SnapshotExpiredError(f"snapshot {self.id} was released or has expired")
        if needs_values and not self.values:
            raise InvalidArgumentError(f"snapshot {self.id} was taken with values=False: "
                                       "it answers head and head_many only")
        return self._view

    async def go_back_async(self, at_sqn: int | None = None,
                            at_time: float | None = None) -> Snapshot:
        """Make this snapshot show the store as it was at SQN ``at_sqn``, or at Unix time
        ``at_time`` (the newest position whose changes were all written by then: nothing
        written later is in the view), within the history the Journal
        keeps (see :mod:`leveled_ray.read.history_view`); returns it. Raises
        :class:`~leveled_ray.errors.HistoryUnavailableError` before where history begins.
        Cost: a read of the journal files that hold the changes since then (and, for
        ``at_time``, of the files that tell when each was written)."""
        if not self.values:
            raise InvalidArgumentError("a view of an earlier moment needs a snapshot with "
                                       "values (it reads the Journal)")
        self._view = await as_of(self._view_for(True), at_sqn, at_time)
        return self

    def _release_soon(self) -> None:
        """End the snapshot without waiting for the Bookie's answer (as :meth:`release_async`
        does; nothing reads it any more). Cost: one call sent."""
        if not self.released:
            self.released = True
            soon = getattr(self._release, "soon", None)
            if soon is not None:
                soon(self.id)

    async def release_async(self) -> None:
        """End the snapshot (idempotent; ``release`` is its synchronous form). Its files may
        be deleted from now on. On a pickled copy, this ends only the copy. Cost: one round
        trip to the Bookie that registered it."""
        if not self.released:
            self.released = True
            if self._release is not None:
                await self._release(self.id)
