"""Snapshots: the store as of one moment, readable from any process (leveled's "clones").

``store.snapshot()`` returns a :class:`Snapshot`. Taking one copies the Bookie's cache of recent
changes and registers with the store's owners; it copies no file. Reads go straight to the
object store from the process that holds the snapshot (or a pickled copy of it: Ray tasks,
Spark executors), so they see exactly the store as of the snapshot, whatever is written,
merged or compacted afterwards.

A snapshot ends with :meth:`Snapshot.release`, at the end of a ``with`` block, or when its
timeout passes (``Options.snapshot_timeout_s``, or ``long_snapshot_timeout_s`` for
``long_running=True``). After that its files may be deleted, so reads raise
:class:`~leveled_ray.errors.SnapshotExpiredError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from .codec import Head, checked_key, checked_keys
from .errors import InvalidArgumentError, SnapshotExpiredError
from .point_in_time import PointInTime, run_sync


class Snapshot:
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

    def _check(self, needs_values: bool = False) -> PointInTime:
        if self.released or time.time() >= self.expires_at:
            raise SnapshotExpiredError(f"snapshot {self.id} was released or has expired")
        if needs_values and not self.values:
            raise InvalidArgumentError(f"snapshot {self.id} was taken with values=False: "
                                       "it answers head and head_many only")
        return self._view

    def release(self) -> None:
        """End the snapshot (idempotent). Its files may be deleted from now on. On a pickled
        copy, this ends only the copy."""
        if self.released:
            return
        self.released = True
        if self._release is not None:
            run_sync(self._release(self.id))

    async def release_async(self) -> None:
        """Awaitable :meth:`release`."""
        if not self.released:
            self.released = True
            if self._release is not None:
                await self._release(self.id)

    # -- reads (validated like the store's) --

    def get(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)`` as of the snapshot, or ``None``."""
        return run_sync(self.get_async(bucket, key))

    def head(self, bucket, key) -> Head | None:
        """The object's :class:`Head` as of the snapshot, or ``None``."""
        return run_sync(self.head_async(bucket, key))

    def get_many(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """Values of many ``(bucket, key)`` pairs as of the snapshot."""
        return run_sync(self.get_many_async(pairs))

    def head_many(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        return run_sync(self.head_many_async(pairs))

    async def get_async(self, bucket, key) -> bytes | None:
        view = self._check(needs_values=True)
        return await view.get(checked_key(bucket, key, view.options))

    async def head_async(self, bucket, key) -> Head | None:
        view = self._check()
        return await view.head(checked_key(bucket, key, view.options))

    async def get_many_async(self, pairs) -> list[bytes | None]:
        view = self._check(needs_values=True)
        return await view.get_many(checked_keys(pairs, view.options))

    async def head_many_async(self, pairs) -> list[Head | None]:
        view = self._check()
        return await view.head_many(checked_keys(pairs, view.options))
