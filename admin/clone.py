"""Clones (forks): a new writable store that starts as a copy of another, sharing its files.

``lr.clone(parent_url, url)`` follows SlateDB's clone RFC, built on put-if-absent only:

1. A checkpoint in the parent, named ``clone:<url>``, pins the version the clone starts from
   (the parent's newest, or the version of a given checkpoint). Found again by name on a retry,
   so a retried clone never leaks a second pin.
2. The clone's first manifest is created with ``initialized=False``: the parent's files under
   ``@<parent store id>/<name>`` (see :mod:`leveled_ray.files.routed`), the parent's own
   ancestors, and the parent and its checkpoint.
3. ``initialized`` becomes true. A store whose manifest is not initialized cannot be opened; a
   retried ``lr.clone`` carries on from where it stopped.

From then on the two stores are independent: each writes under its own path and neither sees the
other's later writes. Merges and journal compaction in the clone rewrite the shared files into
its own; once no version it may still read references an ancestor's file, GC *detaches* it:
the parent's checkpoint is deleted and the manifest forgets its ancestors. Nested clones work
the same way: a clone of a clone reads both ancestors, and a parent keeps its own pin on the
grandparent for as long as a checkpoint of its (its child's) references the grandparent's files.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..clock import system_clock
from ..errors import InvalidArgumentError
from ..files import journal as jfmt
from ..files.routed import foreign_name, is_foreign
from ..files.store import ObjectStore
from ..files.store_config import parse_url, same_store
from ..manifest import checkpoints as cp
from ..manifest.model import CloneParent, Manifest
from ..manifest.store import ManifestStore
from ..options import Options
from .checkpoints import create_checkpoint, release_checkpoint


def clone_manifest(parent: Manifest, parent_url: str, checkpoint_id: str,
                   settings: dict[str, str] | None = None, leases: bool = False) -> Manifest:
    """The clone's first manifest (not yet initialized): the parent's Ledger and journal data
    files as shared files, the parent's ancestors plus the parent itself; the parent's
    settings, with ``settings`` over them (a split's child records the run it owns).
    ``leases``: the parent's history leases too (a split's child: the parent's consumers read
    on in it, and its journal compaction must keep what they have not read)."""
    sid = parent.store_id
    # Shared journal files take no slot: the clone's own slots start again at 0 in its path.
    journal = tuple(replace(j, name=foreign_name(sid, j.name), slot=jfmt.NO_SLOT)
                    for j in parent.journal if j.kind == jfmt.KIND_DATA and j.entries)
    stores = tuple(kv for kv in parent.stores if kv[0] != sid) + ((sid, parent_url),)
    return Manifest.new(**{**dict(parent.settings), **(settings or {})}).with_changes(
        levels=tuple(tuple(replace(s, name=foreign_name(sid, s.name)) for s in level)
                     for level in parent.levels),
        journal=journal, ledger_sqn=parent.ledger_sqn, stores=stores,
        history_sqn=parent.history_sqn, leases=parent.leases if leases else (),
        parent=CloneParent(parent_url, checkpoint_id), initialized=False)


async def create_clone(parent_url: str, url: str, checkpoint: str | None = None,
                       options: Options | None = None,
                       parent_options: Options | None = None,
                       settings: dict[str, str] | None = None,
                       leases: bool = False) -> Manifest:
    """Make (or finish making) the clone at ``url``; returns its initialized manifest.
    ``settings`` and ``leases``: see :func:`clone_manifest`."""
    options = options or Options()
    parse_url(url)
    if same_store(parent_url, url):
        raise InvalidArgumentError("a clone needs a location of its own")
    parent_store = ObjectStore.from_url(parent_url, parent_options or options)
    parents, mine = ManifestStore(parent_store), ManifestStore(ObjectStore.from_url(url, options))
    existing = await mine.latest()
    if existing is not None and existing[1].initialized:
        if existing[1].parent is None or existing[1].parent.url != parent_url:
            raise InvalidArgumentError(f"{url} already holds a store that is not a clone of "
                                       f"{parent_url}")
        return existing[1]
    latest = await parents.latest()
    if latest is None:
        raise InvalidArgumentError(f"no store at {parent_url}")
    if existing is None:
        label = f"clone:{url}"
        pin = next((c for c in cp.live(latest.manifest, system_clock()) if c.name == label),
                   None)
        if pin is None:  # 1. pin the parent's version
            pin = await create_checkpoint(parents, None, label, checkpoint, latest)
        source = await parents.read_pinned(pin.manifest_id)
        # 2. the clone's manifest, not yet initialized (a lost race means another try won)
        await mine.try_create(0, clone_manifest(source, parent_url, pin.id, settings, leases))
    # 3. initialized
    _, done = await mine.update(lambda m: m if m.initialized else
                                m.with_changes(initialized=True))
    return done


def shares_files(names: Iterable[str]) -> bool:
    """Is any of these files (those the versions that may still be read list) an ancestor's?"""
    return any(is_foreign(name) for name in names)


async def detach(store: ObjectStore, options: Options, manifest: Manifest) -> bool:
    """Forget the ancestors of a clone that no longer shares their files: delete its
    checkpoint in the parent, then drop the parent from the manifest. The caller has checked
    :func:`shares_files` over every version that may still be read."""
    parent = manifest.parent
    if parent is None:
        return False
    await release_checkpoint(ManifestStore(ObjectStore.from_url(parent.url, options)),
                             parent.checkpoint_id)  # gone already: a retried detach
    await ManifestStore(store).update(
        lambda m: m.with_changes(parent=None, stores=()) if m.parent else m)
    return True
