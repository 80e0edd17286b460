"""Incremental hot backup (leveled's): a store's Journal, kept up to date at another store URL.

``store.backup(target_url)`` (or ``lr.admin(url).backup(target_url)``, without Ray) pins a
checkpoint, so every write acknowledged before the call is in it and no file it needs is
deleted while the copy runs. Then, as leveled does for a backup that already exists:

1. it copies only the journal files that the target lacks (a nightly backup costs the day's
   changes, not the whole store);
2. it writes the backup's manifest last, as the next version at the target: an interrupted
   backup leaves the previous one whole, and the next backup reuses what it had copied;
3. then it deletes what the new manifest no longer lists: the files that journal compaction
   dropped, and the older manifest versions.

Opening the target restores the store: the Ledger is rebuilt from the Journal, as leveled
rebuilds a lost Ledger (the Ledger is never copied: it can always be rebuilt, and the Journal
alone is smaller). Each journal file is copied byte for byte under a name derived from its own
(the same at every backup), outside the journal slots: files copied by an interrupted backup
are invisible to a restore, which reads only what the manifest lists. A target that was opened
(restored) is a store of its own, and is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import astuple, dataclass, replace

from ..codec.owned import SETTING as OWNS
from ..codec.owned import Owns
from ..errors import InvalidArgumentError
from ..files import journal as jfmt
from ..files.names import JOURNAL_PREFIX, MANIFEST_PREFIX, manifest_name, stable_journal_name
from ..files.routed import is_foreign, store_for
from ..files.store import ObjectStore
from ..manifest.deletion import Proof, deletable
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore, Versioned
from ..options import Options

_COPIES = 8  # objects copied at once

#: The manifest setting that marks a backup, with the id of the store it backs up.
BACKUP_OF = "backup_of"


@dataclass(frozen=True)
class BackupResult:
    """One backup: the journal files it holds, those this run copied and their bytes, the
    objects it deleted, and the highest SQN it holds."""

    files: int
    copied: int
    bytes: int
    removed: int
    max_sqn: int
    version: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def check_target(previous: Versioned | None, source: Manifest, url: str) -> None:
    """A backup goes to an empty location, or over an earlier backup of the same store that
    nobody has opened since (an opened backup is a restored store, with writes of its own)."""
    if previous is None:
        return
    m = previous.manifest
    if m.setting(BACKUP_OF) != source.store_id:
        raise InvalidArgumentError(f"{url} holds a store that is not a backup of this one: "
                                   "back up to an empty location or to this store's backup")
    if m.writer_epoch != 0:
        raise InvalidArgumentError(f"the backup at {url} was opened (restored) since: it is a "
                                   "store of its own now; back up to another location")


def backup_name(info: jfmt.JournalInfo) -> jfmt.JournalInfo:
    """The file as the backup lists it: under a name derived from its own (a clone's files
    shared with an ancestor included), outside the journal slots, so that recovery, which
    reads the slots past the manifest's, never finds a file the manifest does not list."""
    return replace(info, name=stable_journal_name(info.name), slot=jfmt.NO_SLOT)


def backup_manifest(source: Manifest, previous: Versioned | None,
                    files: list[jfmt.JournalInfo]) -> Manifest:
    """The backup's next manifest: the journal files, and an empty Ledger."""
    base = previous.manifest if previous is not None else Manifest.new(
        **dict(source.settings), **{BACKUP_OF: source.store_id})
    return base.with_changes(journal=tuple(files), journal_next_slot=source.journal_next_slot,
                             history_sqn=source.history_sqn)


@dataclass(frozen=True)
class Staged:
    """A backup whose files are copied, and whose manifest is not yet written."""

    version: int
    manifest: Manifest
    files: tuple[jfmt.JournalInfo, ...]
    present: tuple[str, ...]  # journal objects at the target before the copy
    copied: int
    bytes: int

    def result(self, removed: int) -> BackupResult:
        return BackupResult(files=len(self.files), copied=self.copied, bytes=self.bytes,
                            removed=removed, max_sqn=self.manifest.max_journal_sqn,
                            version=self.version)


async def owned_part(source: ObjectStore, info: jfmt.JournalInfo, owns: Owns
                     ) -> tuple[bytes, jfmt.JournalInfo] | None:
    """A split shard's part of a journal file it inherited, as the backup keeps it: the
    entries of the keys it owns (the same bytes every time), or ``None`` if it owns none.
    In the backup the file is no longer an inherited one, so a restore would not filter it."""
    data = await source.get_async(info.name)
    _, _, records = jfmt.read_all(data, info.name)
    kept = [astuple(r) for r in records if owns.owns(r.lkey)]
    if not kept:
        return None
    # Named apart from the whole file's copy, which a backup made before this rule may hold.
    part = f"{info.name}#owned:{owns.route_by}:{owns.start}-{owns.end}"
    data, built = jfmt.build_journal(part, info.epoch, info.slot, kept)
    return data, backup_name(built)


async def stage_journal(source: ObjectStore, target: ObjectStore, manifest: Manifest,
                        progress: Callable[[int, int], None] | None = None) -> Staged:
    """Copy the journal files of ``manifest`` (a pinned version of the store at ``source``)
    that the backup at ``target`` lacks, and make its next manifest (not written yet).
    ``progress(done, total)`` follows the copies. A split shard's inherited files are copied
    as its part of them (:func:`owned_part`): read at every backup, since only their content
    says what the backup lists."""
    previous = await ManifestStore(target).latest()
    check_target(previous, manifest, target.url)
    owns = Owns.decode(manifest.setting(OWNS))
    data = [j for j in manifest.journal if j.kind == jfmt.KIND_DATA and j.entries]
    inherited = [j for j in data if owns is not None and is_foreign(j.name)]
    parts = await asyncio.gather(*(owned_part(source, j, owns) for j in inherited))
    made = {j.name: part for j, part in zip(inherited, parts)}
    files, contents, sources = [], {}, {}
    for j in data:
        if j.name not in made:
            files.append(backup_name(j))
            sources[files[-1].name] = j.name
        elif made[j.name] is not None:
            contents[made[j.name][1].name] = made[j.name][0]
            files.append(made[j.name][1])
    present = {m.path for m in await target.list_async(JOURNAL_PREFIX)}
    missing = [f for f in files if f.name not in present]  # a copy is whole or absent
    sem = asyncio.Semaphore(_COPIES)
    done = copied = 0

    async def copy(info: jfmt.JournalInfo) -> None:
        nonlocal done, copied
        async with sem:
            data = contents.get(info.name) or await source.get_async(sources[info.name])
            await target.put_async(info.name, data)
        done += 1
        copied += len(data)
        if progress is not None:
            progress(done, len(missing))

    await asyncio.gather(*(copy(f) for f in missing))
    return Staged(0 if previous is None else previous.id + 1,
                  backup_manifest(manifest, previous, files), tuple(files),
                  tuple(sorted(present)), len(missing), copied)


async def prune(target: ObjectStore, staged: Staged) -> int:
    """Once the staged version is in place, delete what only older versions listed; returns
    how many objects went. Proof: that version is durable, and it lists every file a restore
    needs."""
    listed = {f.name for f in staged.files} | {manifest_name(staged.version)}
    candidates = list(staged.present) + [m.path for m in
                                         await target.list_async(MANIFEST_PREFIX)]
    stale = deletable(candidates, Proof().need(listed))
    await asyncio.gather(*(target.delete_async(path) for path in stale))
    return len(stale)


async def backup_journal(source: ObjectStore, target: ObjectStore, manifest: Manifest,
                         progress: Callable[[int, int], None] | None = None) -> BackupResult:
    """Bring the backup at ``target`` up to ``manifest`` (a pinned version of the store at
    ``source``): see the module docstring."""
    staged = await stage_journal(source, target, manifest, progress)
    if not await ManifestStore(target).try_create(staged.version, staged.manifest):
        raise InvalidArgumentError(f"another backup or store wrote {target.url} meanwhile")
    return staged.result(await prune(target, staged))


async def backup_version(source: ObjectStore, options: Options, manifest_id: int,
                         target: ObjectStore,
                         progress: Callable[[int, int], None] | None = None) -> BackupResult:
    """Back up version ``manifest_id`` of the store at ``source`` (pinned by the caller) to
    ``target``, reading a clone's shared files from its ancestors."""
    manifest = await ManifestStore(source).read_pinned(manifest_id)
    return await backup_journal(store_for(source, manifest.stores, options), target, manifest,
                                progress)


async def stage_version(source: ObjectStore, options: Options, manifest_id: int,
                        target: ObjectStore,
                        progress: Callable[[int, int], None] | None = None) -> Staged:
    """:func:`stage_journal` of version ``manifest_id`` of the store at ``source``."""
    manifest = await ManifestStore(source).read_pinned(manifest_id)
    return await stage_journal(store_for(source, manifest.stores, options), target, manifest,
                               progress)
