"""What the Inker and the Penciller share: each owns one kind of file, changes the manifest only
under the writer epoch it was started with (so a fenced writer's changes fail), keeps the
registry of snapshots that decides when its removed files may be deleted, and runs its
background tasks (:class:`~.tasks.Tasks`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..clock import Clock
from ..errors import ObjectStoreError
from ..files.framing import codec_id
from ..files.store import ObjectStore
from ..manifest import checkpoints
from ..manifest.model import Manifest
from ..manifest.snapshot_registry import SnapshotRegistry
from ..manifest.store import ManifestStore, Versioned
from ..options import Options
from .tasks import Tasks

#: Attempts of one manifest commit whose outcome stayed unknown (each settles or seals first).
COMMIT_ATTEMPTS = 3


class Owner:
    def __init__(self, store: ObjectStore, options: Options, clock: Clock, epoch: int,
                 latest: Versioned):
        self.store = store
        self.options = options
        self.clock = clock
        self.codec = codec_id(options.compression)
        self.epoch = epoch
        self.manifests = ManifestStore(store)
        self.latest: Versioned = latest
        self._commit_lock = asyncio.Lock()
        self.snapshots = SnapshotRegistry(clock)
        self._checkpoints_read = 0.0
        self.tasks = Tasks(type(self).__name__)
        #: When each of this owner's uploads that may still be published began, in wall time
        #: (as its outputs' ULID names): the snapshot lease tells GC the oldest
        #: (:meth:`uploads_since`).
        self._uploads: dict[object, float] = {}

    def begin_upload(self) -> tuple[object, float]:
        """Record an upload (a flush's, merge's or compaction's outputs) about to be written;
        returns its token, for :meth:`end_upload`, and its start by the clock."""
        token = object()
        self._uploads[token] = time.time()
        return token, self.clock()

    def end_upload(self, token: object) -> None:
        """The upload was published or given up: it no longer needs GC to wait."""
        self._uploads.pop(token, None)

    def uploads_since(self) -> float | None:
        """The start (wall time) of the oldest upload this owner may still publish, if any."""
        return min(self._uploads.values(), default=None)

    async def commit(self, transition: Callable[..., Manifest], *args) -> Versioned:
        """Apply ``transition(manifest, epoch, *args)`` to the newest manifest (the CAS loop);
        raises ``FencedError`` if a newer writer has claimed the store. One commit at a time,
        so the manifest this owner holds only moves forward.

        A commit whose outcome stayed unknown is tried again: the transitions are idempotent,
        so if the first attempt landed, the second finds it applied and writes nothing."""
        async with self._commit_lock:
            for attempt in range(COMMIT_ATTEMPTS):
                try:
                    self.latest = await self.manifests.update(
                        lambda m: transition(m, self.epoch, *args), self.latest)
                    return self.latest
                except ObjectStoreError as exc:
                    if exc.definite or attempt == COMMIT_ATTEMPTS - 1:
                        raise
                    self.counters["commit_retries"] += 1
            raise AssertionError("unreachable")

    # -- snapshots and the delete rule --

    def register_snapshot(self, snapshot_id: str, timeout_s: float,
                          manifest_id: int | None = None) -> int:
        """Register a snapshot of this owner's files as of ``manifest_id`` (default: this
        owner's newest version, which a reader cannot be behind of); returns that version."""
        version = self.latest.id if manifest_id is None else min(manifest_id,
                                                                    self.latest.id)
        self.snapshots.register(snapshot_id, version, timeout_s)
        return version

    def release_snapshot(self, snapshot_id: str) -> None:
        self.snapshots.release(snapshot_id)

    async def may_delete(self, removed_in: int) -> bool:
        """May a file removed by manifest version ``removed_in`` be deleted? (leveled's
        ``ready_to_delete``: only when no live snapshot reads an older version, and no live
        checkpoint pins one.)

        Every checkpoint that can need the file is in this owner's manifest: it pins an older
        version, so it was committed before the removal, which was applied on top of it. A
        checkpoint deleted since is seen by re-reading the manifest, at most every few seconds.
        """
        if not self.snapshots.ready_to_delete(removed_in):
            return False
        if not checkpoints.blocks_delete(self.latest.manifest, removed_in, self.clock()):
            return True
        if time.monotonic() - self._checkpoints_read > 5.0:
            self._checkpoints_read = time.monotonic()
            async with self._commit_lock:  # so the manifest held only moves forward
                self.latest = await self.manifests.latest(self.latest)
        return not checkpoints.blocks_delete(self.latest.manifest, removed_in, self.clock())
