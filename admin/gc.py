"""Garbage collection: delete the objects nothing can read any more.

Replaced files are normally deleted by their clerks (``delete_pending``) as soon as no snapshot
needs them. GC is the backstop: files of a writer that crashed, uploads that were never
published, clerks that gave up, old manifest versions, and destroyed stores.

An object is deleted only if all of these hold (:func:`plan`, a pure function):

* the current manifest does not reference it, nor the manifest any live checkpoint pins (clones
  pin their parent through a checkpoint);
* no manifest that was current within ``window`` seconds references it: a registered snapshot
  (at most ``long_snapshot_timeout_s``) reads a version that was current when it was taken;
* it is older than ``min_age``: younger objects may be uploads about to be published (SlateDB
  #1044); merges and compactions refuse to publish outputs older than half of it;
* it is not in the journal tail (slots the manifest has not recorded yet), and it is not a
  fence: a name a stale writer could otherwise create again (SlateDB #352, #1622).

Manifest versions go too once nothing keeps them, the newest always stays, and a destroyed store
loses everything once its grace period has passed and no checkpoint is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ObjectStoreError
from ..files.names import (
    JOURNAL_PREFIX,
    LEDGER_PREFIX,
    MANIFEST_PREFIX,
    journal_slot_of,
    manifest_id_of,
    manifest_name,
    ulid_age,
)
from ..files.store import ObjectMeta, ObjectStore
from ..manifest import checkpoints as cp
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..options import Options, check_number
from .clone import detach, shares_files


def check_publishable(paths: Iterable[str], options: Options, now: float) -> None:
    """Refuse to publish files written more than half of ``gc_min_age_s`` ago: GC may already
    treat them as orphans. The merge or compaction is redone instead."""
    limit = options.gc_min_age_s / 2
    old = [p for p in paths if (ulid_age(p, now) or 0.0) > limit]
    if old:
        raise ObjectStoreError(f"outputs written over {limit:.0f}s ago are not published "
                               f"(GC may collect them): {old[:3]}", definite=True)


def needed_versions(metas: Iterable[ObjectMeta], latest: tuple[int, Manifest], now: float,
                    min_age: float, window: float) -> set[int]:
    """The manifest versions GC must keep (and read): the newest, every checkpoint's, every
    version that was current within ``window``, and every version younger than ``min_age``."""
    latest_id, manifest = latest
    created = sorted((manifest_id_of(m.path), m.last_modified) for m in metas
                     if manifest_id_of(m.path) is not None)
    keep = {latest_id} | {c.manifest_id for c in cp.live(manifest, now)}
    for (mid, made), (_, successor_made) in zip(created, created[1:] + [(None, now)]):
        if now - successor_made < window or now - made < min_age:
            keep.add(mid)
    return keep


def referenced(manifest: Manifest) -> set[str]:
    """Every object a manifest version reads."""
    return ({s.name for s in manifest.sst_files()} | {j.name for j in manifest.journal})


@dataclass
class Plan:
    """What one GC pass deletes (data files first, then manifests), and why others stay."""

    files: list[str] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)  # reason -> count
    detached: bool = False  # a clone that stopped sharing its ancestors' files

    @property
    def paths(self) -> list[str]:
        return self.files + self.manifests


def plan(metas: list[ObjectMeta], latest: tuple[int, Manifest], versions: dict[int, Manifest],
         now: float, min_age: float, window: float, grace: float) -> Plan:
    """The deletions for one pass, from a listing, the newest manifest and the versions
    :func:`needed_versions` asked for."""
    latest_id, manifest = latest
    out = Plan()

    def keep(reason: str) -> None:
        out.kept[reason] = out.kept.get(reason, 0) + 1

    destroyed = (manifest.destroyed_at is not None and now - manifest.destroyed_at >= grace
                 and not cp.live(manifest, now))
    refs: set[str] = set()
    if not destroyed:
        for v in versions.values():
            refs |= referenced(v)
    for meta in metas:
        path = meta.path
        mid = manifest_id_of(path)
        if mid is not None:
            if destroyed:
                if mid != latest_id:
                    out.manifests.append(path)
            elif mid in versions or mid == latest_id:
                keep("manifest in use")
            elif now - meta.last_modified < min_age:
                keep("young")
            else:
                out.manifests.append(path)
            continue
        if not path.startswith((LEDGER_PREFIX, JOURNAL_PREFIX)):
            keep("not the store's")
            continue
        if destroyed:
            out.files.append(path)
            continue
        slot = journal_slot_of(path)
        if path in refs:
            keep("referenced")
        elif slot is not None and slot >= manifest.journal_next_slot:
            keep("journal tail")
        elif now - meta.last_modified < min_age:
            keep("young")
        else:
            out.files.append(path)
    if destroyed:  # the newest manifest goes last, so a half-done pass can be resumed
        out.manifests = sorted(out.manifests) + [manifest_name(latest_id)]
    return out


async def collect(store: ObjectStore, options: Options, *, min_age: float | None = None,
                  dry_run: bool = False, now: float | None = None, progress=None) -> Plan:
    """One GC pass over the store: list, read what must be kept, delete the rest (unless
    ``dry_run``). The listing comes first, so an object created during the pass is never in
    it; an object the manifest gained meanwhile is younger than ``min_age``."""
    min_age = options.gc_min_age_s if min_age is None else check_number("min_age", min_age,
                                                                         minimum=0.0)
    now = time.time() if now is None else now
    metas = [m for prefix in (MANIFEST_PREFIX, LEDGER_PREFIX, JOURNAL_PREFIX)
             for m in await store.list_async(prefix)]
    manifests = ManifestStore(store)
    latest = await manifests.latest()
    if latest is None:
        return Plan()
    window = options.long_snapshot_timeout_s
    versions = {}
    for mid in needed_versions([m for m in metas if m.path.startswith(MANIFEST_PREFIX)],
                               latest, now, min_age, window):
        try:
            versions[mid] = latest.manifest if mid == latest.id else await manifests.read(mid)
        except Exception:  # a pinned version that is gone pins nothing
            continue
    out = plan(metas, latest, versions, now, min_age, window, grace=min_age)
    if latest.manifest.parent is not None and not shares_files(versions.values()):
        out.detached = dry_run or await detach(store, options, latest.manifest)
    if not dry_run:
        for n, path in enumerate(out.paths):
            await store.delete_async(path)
            if progress is not None:
                progress(n + 1, len(out.paths))
    return out
