"""Incremental hot backup of a sharded store: every shard's backup at one consistent cut."""

from __future__ import annotations

from ..admin.backup import backup_version
from ..client.progress import progress_of
from ..errors import InvalidArgumentError
from ..files.names import MANIFEST_PREFIX
from ..files.store import ObjectStore, parse_url
from ..manifest.shard_map import create_shard_map, read_shard_map
from ..options import Options
from . import checkpoints
from .totals import totals


async def backup(store, target_url: str, target_options: Options | None, progress) -> dict:
    """Back up every shard of ``store`` as of one checkpoint (a cut) to the same layout at
    ``target_url``: an empty location, or an earlier backup of this store. The shard map is
    written once every shard is copied."""
    parse_url(target_url)
    options = target_options or store.options
    root = ObjectStore.from_url(target_url, options)
    found = await read_shard_map(root)
    if found is not None and (found.prefixes, found.runs, found.route_by) != (
            store.shard_map.prefixes, store.shard_map.runs, store.shard_map.route_by):
        raise InvalidArgumentError(f"{target_url} holds a sharded store of another layout")
    if found is None and await root.list_async(MANIFEST_PREFIX):
        raise InvalidArgumentError(f"{target_url} holds a plain store")
    pin, parts = await checkpoints.create(store, store.options.gc.long_snapshot_timeout_s,
                                          "backup", None)
    try:
        results = []
        for shard, part in enumerate(parts):
            source = ObjectStore.from_url(store.shard_map.shard_url(store.url, shard),
                                          store.options)
            target = ObjectStore.from_url(store.shard_map.shard_url(target_url, shard), options)
            done = await backup_version(source, store.options, part.manifest_id, target,
                                        progress_of(progress, f"backup shard {shard}"))
            results.append(done.as_dict())
        if found is None:
            await create_shard_map(root, store.shard_map)
    finally:
        await checkpoints.delete(store, pin.id)
    return {**totals(results), "shards": results}
