"""Incremental hot backup of a sharded store: every shard's backup at one consistent cut, with
one commit point (see :mod:`leveled_ray.manifest.backup_records`).

1. A checkpoint of every shard at one cut pins what is copied.
2. Each shard's new journal files are copied to the same layout at the target.
3. The record ``backups/<n>`` at the target's root is created: the commit point.
4. Each shard's backup manifest is written, then what only older versions listed is deleted;
   the first backup then writes the target's shard map.

A backup interrupted before step 3 leaves every shard at the previous backup (the next one
reuses the copies); the first backup to a target marks it unfinished until step 4, so that no
open takes a half-copied target for a store. After step 3, :func:`finish_backup` completes
it, and the next backup and every open or administration of the target call it first.
Opening the target restores the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from ..admin.backup import prune, stage_version
from ..admin.progress import progress_of
from ..errors import ConflictError, InvalidArgumentError, ObjectStoreError
from ..files.names import MANIFEST_PREFIX
from ..files.store import ObjectStore
from ..files.store_config import parse_url
from ..manifest.backup_records import (
    BACKUP_PREFIX,
    BackupRecord,
    backup_record_name,
    create_backup_record,
    newest_backup,
)
from ..manifest.shard_map import (
    ShardMap,
    create_shard_map,
    mark_unfinished,
    read_shard_map,
    unmark_unfinished,
)
from ..manifest.store import ManifestStore
from ..options import Options
from . import checkpoints
from .split import settle_splits
from .totals import totals


async def finish_backup(root: ObjectStore, options: Options) -> ShardMap | None:
    """Complete the newest sharded backup at ``root``, if one was interrupted after its
    record: each shard whose newest manifest is older than the record's gets the record's,
    then the shard map is written if absent. Returns the shard map, or ``None`` when
    ``root`` holds no sharded backup."""
    found = await newest_backup(root)
    if found is None:
        return None
    _, record = found
    await asyncio.gather(*(_roll_forward(
        ObjectStore.from_url(record.shard_map.shard_url(root.url, s), options), version,
        manifest) for s, (version, manifest) in enumerate(zip(record.versions,
                                                             record.manifests))))
    return await create_shard_map(root, record.shard_map)


async def _roll_forward(target: ObjectStore, version: int, manifest) -> None:
    manifests = ManifestStore(target)
    latest = await manifests.latest()
    if latest is None or latest.id < version:
        await manifests.try_create(version, manifest)  # lost to another finisher: the same


async def find_shard_map(root: ObjectStore, options: Options) -> ShardMap | None:
    """The shard map at ``root`` (``None``: a plain store, or none yet), once a sharded backup
    interrupted there after its commit point is finished, and a split after its commit point
    published (see :func:`.split.settle_splits`)."""
    found = await finish_backup(root, options) or await read_shard_map(root)
    return None if found is None else await settle_splits(root, found, options)


async def backup(store, target_url: str, target_options: Options | None, progress) -> dict:
    """Back up every shard of ``store`` (a sharded store or its admin) as of one checkpoint
    to the same layout at ``target_url``: an empty location, or an earlier backup of this
    store."""
    parse_url(target_url)
    options = target_options or store.options
    root = ObjectStore.from_url(target_url, options)
    shard_map = store.shard_map  # the layout the checkpoint must be of
    layout = dataclasses.replace(shard_map, version=1)
    found = await find_shard_map(root, options)
    if found is not None and not found.same_layout(layout):
        raise InvalidArgumentError(f"{target_url} holds a sharded store of another layout")
    if found is None and await root.list_async(MANIFEST_PREFIX):
        raise InvalidArgumentError(f"{target_url} holds a plain store")
    targets = [ObjectStore.from_url(layout.shard_url(target_url, s), options)
               for s in range(layout.count)]
    if found is None:  # a new backup: no open takes its shards for a store until 4.
        await mark_unfinished(root, "backup")
    pin, parts = await checkpoints.create(store, store.options.gc.long_snapshot_timeout_s,
                                          "backup", None)
    try:
        if store.shard_map != shard_map:  # its handle followed a split or move meanwhile
            raise ConflictError("not backed up: a split or move changed the store's layout "
                                "while the backup began; run it again")
        staged = []
        for shard, part in enumerate(parts):  # 2.
            source = ObjectStore.from_url(shard_map.shard_url(store.url, shard),
                                          store.options)
            staged.append(await stage_version(source, store.options, part.manifest_id,
                                              targets[shard],
                                              progress_of(progress, f"backup shard {shard}")))
        newest = await newest_backup(root)
        number = 1 if newest is None else newest[0] + 1
        record = BackupRecord(layout, tuple(s.version for s in staged),
                              tuple(s.manifest for s in staged))
        if not await create_backup_record(root, number, record):  # 3.
            raise InvalidArgumentError(f"another backup wrote {target_url} meanwhile")
        await finish_backup(root, options)  # 4.
        await unmark_unfinished(root, "backup")
        removed = [await prune(t, s) for t, s in zip(targets, staged)]
        for meta in await root.list_async(BACKUP_PREFIX):  # only the newest is ever read
            if meta.path < backup_record_name(number):
                with contextlib.suppress(ObjectStoreError):
                    await root.delete_async(meta.path)
    finally:
        await checkpoints.delete(store, pin.id)
    results = [s.result(r).as_dict() for s, r in zip(staged, removed)]
    return {**totals(results), "shards": results}
