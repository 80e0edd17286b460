"""``lr.admin(url)``, ``lr.gc`` and ``lr.destroy`` on a sharded store: each shard's own, plus
the root's commit records and shard map.

Without Ray there is no cut (see :mod:`.cut`): a checkpoint made here is consistent only when
no shard is being written and no cross-shard batch is half settled. So it is refused while any
shard has a live writer (a fresh snapshot lease) or holds a prepared part; take it through the
running store (``store.checkpoint()``) instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .. import roles, roles_admin
from ..admin import gc as garbage_collection
from ..admin.handle import Admin
from ..admin.pinned_reads import ChangesWithoutRay, PinnedReads
from ..clock import Clock, system_clock
from ..errors import ObjectStoreError
from ..files.names import ulid_age
from ..files.store import ObjectStore
from ..files.sync import with_sync_twins
from ..manifest.backup_records import BACKUP_PREFIX
from ..manifest.model import Checkpoint
from ..manifest.shard_map import SHARD_MAP_PREFIX, ShardMap, retired_prefixes
from ..manifest.store import ManifestStore
from ..manifest.txn_records import (
    STREAM_TXN,
    TXN_PREFIX,
    txn_of_part,
    unneeded_stream_records,
)
from ..options import Options
from . import checkpoints
from .backup import backup
from .quiet import check_quiet
from .split import split_shard


async def earlier_layouts(root: ObjectStore, url: str, current: ShardMap, options: Options,
                          clock: Clock) -> list[ShardedAdmin]:
    """An admin over each version of the shard map at ``root`` older than ``current``,
    newest first (see :meth:`ShardedAdmin._earlier_layouts_async`)."""
    names = sorted((m.path for m in await root.list_async(SHARD_MAP_PREFIX)), reverse=True)
    out = []
    for name in names:
        older = ShardMap.decode(await root.get_async(name), name)
        if older.version < current.version:
            out.append(ShardedAdmin(url, older, options, clock))
    return out


async def quiet_cut(store, take, _early=None) -> tuple[list, float]:
    """What :func:`.cut.cut` gives, for a store no one writes: each shard as it is."""
    await asyncio.gather(*(check_quiet(store.shard(s), s) for s in range(store.shards)))
    return list(await asyncio.gather(*(take(s) for s in range(store.shards)))), 0.0


@with_sync_twins
class ShardedAdmin(ChangesWithoutRay, checkpoints.CheckpointsOfShards,
                   roles.History, roles.Checkpoints, roles_admin.Administration,
                   roles.Backups, roles_admin.Splits):
    """Administration of a sharded store at a URL, without Ray: each shard's :class:`Admin`,
    checkpoints with one id in every shard, the root's records, and the change feed (each
    shard's on a checkpoint of its own: a feed's position needs no cut)."""

    def __init__(self, url: str, shard_map: ShardMap, options: Options | None = None,
                 clock: Clock | None = None):
        self.url = url
        self.shard_map = shard_map
        self.options = options or Options()
        self.clock = clock or system_clock
        self.root = ObjectStore.from_url(url, self.options)
        self._admins = [Admin(shard_map.shard_url(url, s), self.options, self.clock)
                        for s in range(shard_map.count)]

    @property
    def shards(self) -> int:
        return self.shard_map.count

    def shard(self, index: int) -> Admin:
        """Shard ``index``'s own :class:`Admin`. Cost: none."""
        return self._admins[index]

    def _pinned_reads(self) -> PinnedReads:
        return PinnedReads(self._admins, self.shard_map)

    # -- checkpoints taken under an earlier shard map (before a split) --

    async def _earlier_layouts_async(self) -> list[ShardedAdmin]:
        """An admin over each earlier version of the shard map, newest first (see
        :mod:`.checkpoints`)."""
        return await earlier_layouts(self.root, self.url, self.shard_map, self.options,
                                     self.clock)

    # -- what :mod:`.checkpoints` needs: a cut, and one shard's part of a checkpoint --

    async def _cut(self, take, early=None):
        return await quiet_cut(self, take)

    async def _checkpoint_part(self, shard: int, lifetime, name, source, checkpoint_id):
        return await self._admins[shard].create_checkpoint_async(
            lifetime, name, source, checkpoint_id=checkpoint_id)

    async def create_checkpoint_async(self, lifetime: float | None = None,
                                      name: str | None = None, source: str | None = None, *,
                                      checkpoint_id: str | None = None) -> Checkpoint:
        """A checkpoint of every shard, with one id (``checkpoint_id`` or a new one); refused
        while the store is being written (see the module's note). Cost: the plain call's on
        each shard, at once."""
        return (await checkpoints.create(self, lifetime, name, source, checkpoint_id))[0]

    async def gc_async(self, min_age: float | None = None, dry_run: bool = False,
                       progress=None) -> garbage_collection.Plan:
        """One GC pass on every shard (and on each shard a split retired: its files go once
        no checkpoint holds them, the children's pins among them), then on the root's commit
        records: a record goes once
        no shard holds its batch's part (every part was applied or dropped) and it is older
        than ``min_age`` (a streaming write's, once a newer batch of its writer has records).
        Returns the shards' plans together (paths under each shard's prefix). Cost: the plain
        pass on each shard in turn, then a listing of the root's records."""
        retired = []  # those a pass has not deleted whole yet
        for prefix in await retired_prefixes(self.root, self.shard_map):
            admin = Admin(f"{self.url.rstrip('/')}/{prefix}", self.options, self.clock)
            if await ManifestStore(admin.store).latest() is not None:
                retired.append((prefix, admin))
        admins = self._admins + [admin for _, admin in retired]
        plans = [await a.gc_async(min_age, dry_run, progress) for a in admins]
        out = garbage_collection.Plan()
        for prefix, p in zip(self.shard_map.prefixes + tuple(p for p, _ in retired), plans):
            out.files += [f"{prefix}/{x}" for x in p.files]
            out.leases += [f"{prefix}/{x}" for x in p.leases]
            out.manifests += [f"{prefix}/{x}" for x in p.manifests]
            out.failed += [f"{prefix}/{x}" for x in p.failed]
            out.doubts += p.doubts
            for reason, count in p.kept.items():
                out.kept[reason] = out.kept.get(reason, 0) + count
        records = await self._unneeded_records(
            self.options.gc.min_age_s if min_age is None else min_age)
        out.files += records
        if not dry_run:
            for path in records:
                try:
                    await self.root.delete_async(path)
                except ObjectStoreError:
                    out.failed.append(path)  # proven unneeded: the next pass deletes it
        return out

    async def _unneeded_records(self, min_age: float) -> list[str]:
        """Commit records no shard needs: listed before the shards' parts, so a record whose
        parts were still being settled is seen with them. A streaming write's records go
        once a newer batch of its writer has records (whatever their age)."""
        now = self.clock()
        # Whatever min_age: a bulk write's client decides within its publish window of
        # beginning its commit (bulk/sharded.py), and an absent record reads as undecided: an
        # aborted batch's record deleted sooner would let its late client decide commit.
        min_age = max(min_age, self.options.gc.publish_window_s)
        listed = [m.path for m in await self.root.list_async(TXN_PREFIX)]
        held = {txn_of_part(m.path) for a in self._admins
                for m in await a.store.list_async(TXN_PREFIX)}
        aged = [path for path in listed if (ulid_age(path, now) or 0) >= min_age
                and not path.startswith(TXN_PREFIX + STREAM_TXN)]
        return [path for path in aged if path.removeprefix(TXN_PREFIX) not in held] + \
            unneeded_stream_records(listed, held)

    async def backup_async(self, target_url: str, *, target_options: Options | None = None,
                           progress: bool | Callable[[int, int], None] = True) -> dict:
        """Back up every shard to the same layout at ``target_url``, at a checkpoint made
        here (refused while the store is being written); ``progress`` as for
        :meth:`Admin.backup_async`. Cost: a sharded checkpoint, then the plain backup's
        copies of every shard."""
        return await backup(self, target_url, target_options, progress)

    async def split_shard_async(self, shard: int) -> ShardMap:
        """Split shard ``shard`` in two, by reference (see :mod:`.split`): each child starts
        from its files and owns half its partitions, and nothing is copied. Refused while the
        shard is being written (split through the running store then). This handle then
        reads the new layout; the new shard map is returned. Cost: a few manifest writes on
        the shard, two clones (a checkpoint each), and a shard map version."""
        self.shard_map = await split_shard(self.url, shard, self.options)
        self._admins = [Admin(self.shard_map.shard_url(self.url, s), self.options, self.clock)
                        for s in range(self.shard_map.count)]
        return self.shard_map

    async def destroy_async(self, soft: bool = True) -> int:
        """Destroy every shard (see :meth:`Admin.destroy_async`); ``soft=False`` also deletes
        the root's records (commit records, backup records) and, last, its shard map. Returns
        the objects deleted. Cost: the plain call's on each shard in turn."""
        deleted = sum([await a.destroy_async(soft) for a in self._admins])
        if soft:
            return deleted
        for prefix in (TXN_PREFIX, BACKUP_PREFIX):
            for meta in await self.root.list_async(prefix):
                await self.root.delete_async(meta.path)
                deleted += 1
        for meta in await self.root.list_async(SHARD_MAP_PREFIX):
            await self.root.delete_async(meta.path)
            deleted += 1
        return deleted
