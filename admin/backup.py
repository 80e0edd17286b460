"""Hot backup: a running store's Journal, copied to another store URL.

``store.backup(target_url)`` takes a checkpoint (so every write acknowledged before the call is
in it, and no file it needs is deleted while the copy runs), copies that version's journal files
to the target, writes the target's first manifest (the journal files, and an empty Ledger), and
deletes the checkpoint. Opening the target restores the store: the Ledger is rebuilt from the
Journal, as leveled rebuilds a lost Ledger.

The journal files keep their names and content, so a copy can be checked byte for byte (a
clone's files shared with an ancestor are copied too, under names of the backup's own); the
Ledger is not copied because it can always be rebuilt, and the Journal alone is smaller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from ..errors import InvalidArgumentError
from ..files import journal as jfmt
from ..files.names import compacted_journal_name
from ..files.routed import is_foreign
from ..files.store import ObjectStore
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore

_COPIES = 8  # objects copied at once


async def copy_journal(source: ObjectStore, target: ObjectStore, manifest: Manifest,
                       progress: Callable[[int, int], None] | None = None) -> dict:
    """Copy ``manifest``'s journal data files from ``source`` to a new store at ``target``,
    and write the target's manifest. Refuses a target that already holds a store."""
    manifests = ManifestStore(target)
    if await manifests.latest() is not None:
        raise InvalidArgumentError(f"{target.url} already holds a store: back up to an empty "
                                   "location")
    files = [j for j in manifest.journal if j.kind == jfmt.KIND_DATA and j.entries]
    sem = asyncio.Semaphore(_COPIES)
    done = copied = 0

    async def copy(info: jfmt.JournalInfo) -> jfmt.JournalInfo:
        nonlocal done, copied
        # A clone's shared files (``@<ancestor>/...``) become the backup's own.
        own = info if not is_foreign(info.name) else replace(
            info, name=compacted_journal_name(), slot=jfmt.NO_SLOT)
        async with sem:
            data = await source.get_async(info.name)
            await target.put_async(own.name, data)
        done += 1
        copied += len(data)
        if progress is not None:
            progress(done, len(files))
        return own

    files = await asyncio.gather(*(copy(f) for f in files))
    slots = [f.slot + 1 for f in files if f.slot != jfmt.NO_SLOT]
    restored = Manifest.new(**dict(manifest.settings)).with_changes(
        journal=tuple(files), journal_next_slot=max([manifest.journal_next_slot] + slots))
    if not await manifests.try_create(0, restored):
        raise InvalidArgumentError(f"another store appeared at {target.url} during the backup")
    return {"files": len(files), "bytes": copied, "max_sqn": restored.max_journal_sqn}
