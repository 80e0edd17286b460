"""``lr.reader(url)``: a read-only handle on a store at one checkpoint, in any process, without
Ray (see :class:`~leveled_ray.read.store_reader.StoreReader`).
"""
from __future__ import annotations

from .. import roles, roles_admin
from ..admin.checkpoint_lease import CheckpointLease
from ..admin.handle import Admin
from ..clock import Clock
from ..errors import (
    CheckpointNotFoundError,
    InvalidArgumentError,
    SnapshotExpiredError,
)
from ..files.sync import with_sync_twins
from ..manifest.model import Checkpoint
from ..options import Options
from ..read.history_view import as_of, check_moment
from ..read.point_in_time import KeyReads
from ..read.queries import Queries
from ..read.store_reader import StoreReader


@with_sync_twins
class Reader(KeyReads, Queries, roles.KeyReads, roles.Queries, roles.History,
             roles_admin.Following):
    """A read-only handle on a store at one checkpoint, usable from any process (no Ray).

    Opened by :func:`leveled_ray.client.reader`. Without a ``checkpoint`` it pins its own (for
    ``lifetime`` seconds, renewed as it is used, deleted by :meth:`close`) on the newest
    manifest; :meth:`refresh` moves it to the newest. With a ``checkpoint`` id it follows that
    one and never changes it. A pickled copy reads the same checkpoint and owns nothing.
    """

    def __init__(self, url: str, checkpoint: str | None = None,
                 options: Options | None = None, lifetime: float = 600.0,
                 _owns: bool | None = None, clock: Clock | None = None,
                 at_sqn: int | None = None, at_time: float | None = None):
        check_moment(at_sqn, at_time)
        self.at_sqn, self.at_time = at_sqn, at_time
        self.url = url
        self.options = options or Options()
        self.lifetime = lifetime
        self.checkpoint_id = checkpoint
        self.owns = checkpoint is None if _owns is None else _owns
        self._admin = Admin(url, self.options, clock)
        self._view: StoreReader | None = None
        self._lease: CheckpointLease | None = None  # of the checkpoint it owns
        self._made: Checkpoint | None = None  # the checkpoint it made last (no list to find it)
        self.closed = False

    def __reduce__(self):
        return (Reader, (self.url, self.checkpoint_id, self.options, self.lifetime, False,
                         self._admin.clock, self.at_sqn, self.at_time))

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def _view_async(self, needs_values: bool) -> StoreReader:
        if self.closed:
            raise SnapshotExpiredError("the reader is closed")
        if self.checkpoint_id is None:
            await self.refresh_async()
        if self._view is None:
            pinned = self._made
            if pinned is None or pinned.id != self.checkpoint_id:
                found = await self._admin.list_checkpoints_async()
                pinned = next((c for c in found if c.id == self.checkpoint_id), None)
                if pinned is None:
                    raise CheckpointNotFoundError(f"no live checkpoint {self.checkpoint_id!r}")
            view = await StoreReader.open(self._admin.store, self.options,
                                          manifest_id=pinned.manifest_id,
                                          clock=self._admin.clock)
            if self.at_time is not None or self.at_sqn is not None:  # an earlier moment
                view = await as_of(view, self.at_sqn, self.at_time)
            self._view = view
        if self._lease is not None:
            await self._lease.keep()
        return self._view

    async def _explain(self, damage):
        """A missing file of a checkpoint that was deleted or expired is not damage: say so."""
        if self.checkpoint_id is not None and not any(
                c.id == self.checkpoint_id for c in await self._admin.list_checkpoints_async()):
            return CheckpointNotFoundError(f"checkpoint {self.checkpoint_id!r} that this reader "
                                           f"follows was deleted or expired; its files may be "
                                           f"gone ({damage.path})")
        return damage

    async def _go_back_async(self, at_sqn: int) -> Reader:
        """From now on read the store as it was at SQN ``at_sqn`` (at or below where this
        reader reads, within the history the Journal keeps); returns the reader."""
        self._view = await as_of(await self._view_async(True), at_sqn)
        self.at_sqn, self.at_time = at_sqn, None
        return self

    @property
    def renew_failures(self) -> int:
        return 0 if self._lease is None else self._lease.failures

    async def refresh_async(self) -> None:
        """Move to the newest manifest (readers that own their checkpoint only). Cost: a new
        checkpoint and the old one's delete (two manifest writes), then the new version's
        manifest read on the next call."""
        if not self.owns:
            raise InvalidArgumentError("this reader follows a given checkpoint: it cannot "
                                       "move (open a new reader for a newer one)")
        old = self.checkpoint_id
        new = await self._admin.create_checkpoint_async(self.lifetime, name="reader")
        self.checkpoint_id, self._view, self._made = new.id, None, new
        self._lease = CheckpointLease(self._admin.manifests, new.id, self.lifetime,
                                      self._admin.clock)
        if old is not None:
            await self._admin.delete_checkpoint_async(old)

    async def close_async(self) -> None:
        """Stop reading; an owned checkpoint is deleted (``close`` is its synchronous form).
        Cost: one manifest write for an owned checkpoint, else none."""
        if not self.closed:
            self.closed = True
            if self.owns and self.checkpoint_id is not None:
                try:
                    await self._admin.delete_checkpoint_async(self.checkpoint_id)
                except CheckpointNotFoundError:
                    pass  # expired already

    @property
    def manifest_id(self) -> int | None:
        return None if self._view is None else self._view.manifest_id

    def stats(self) -> dict:
        """This reader's figures, in the form of ``store.stats()`` for what a reader does: the
        version it reads, its object-store requests and its file cache. Cost: none (no
        I/O)."""
        cache = None if self._view is None else self._view.host.cache
        return {
            "url": self.url,
            "checkpoint": self.checkpoint_id,
            "manifest_id": self.manifest_id,
            "renew_failures": self.renew_failures,
            "file_cache": {"bytes": cache.used, "items": len(cache), "hits": cache.hits,
                           "misses": cache.misses} if cache is not None else {},
            "io": self._admin.store.stats.as_dict(),
            "state": "closed" if self.closed else "open",
        }


def open_plain_reader(url: str, checkpoint: str | None = None, *,
                      options: Options | None = None, lifetime: float = 600.0,
                      clock: Clock | None = None, at_sqn: int | None = None,
                      at_time: float | None = None) -> Reader:
    """A :class:`Reader` of the plain store at ``url``: what :func:`leveled_ray.reader` builds
    on (its arguments are that function's)."""
    out = Reader(url, checkpoint, options, lifetime, clock=clock, at_sqn=at_sqn,
                 at_time=at_time)
    if checkpoint is None:
        out.refresh()
    return out
