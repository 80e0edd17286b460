"""Garbage collection: delete the objects nothing can read any more.

Replaced files are normally deleted by their clerks (``delete_pending``) as soon as no snapshot
needs them. GC is the backstop: files of a writer that crashed, uploads that were never
published, clerks that gave up, old manifest versions, and destroyed stores.

A pass lists the store, reads the newest manifest, every snapshot lease and every manifest
version it must keep, and then deletes an object only if all of these hold (:func:`plan`, a
pure function, which leaves the decision to :func:`~leveled_ray.manifest.deletion.deletable`):

* the current manifest does not reference it, nor the manifest any live checkpoint pins (clones
  pin their parent through a checkpoint);
* no version a snapshot may read references it: the snapshot leases say which
  (:mod:`~leveled_ray.manifest.snapshot_leases`); where nothing better is known (the current
  writer has no lease), every version current within ``long_snapshot_timeout_s`` is kept;
* it is older than ``min_age``: younger objects may be uploads about to be published (SlateDB
  #1044); merges and compactions refuse to publish outputs older than half of ``gc.min_age_s``
  (their writer's ``publish_window_s``);
* its writer may not be publishing it: a running writer's lease says when its oldest upload in
  flight began, and the pass keeps unreferenced files written since, whatever ``min_age`` it
  was given (:func:`~leveled_ray.manifest.snapshot_leases.may_publish`), so that
  ``min_age=0`` on a running store never deletes a merge's output about to be published. Bulk
  writes are the caller's: a ``min_age`` shorter than their upload deletes their partitions;
* it is not in the journal tail (slots the manifest has not recorded yet), and it is not a
  fence: a name a stale writer could otherwise create again (SlateDB #352, #1622);
* no prepared part of a bulk write across shards names it (``txn/<id>.part``): it is
  installed if that write commits, however late.

**Doubt means keep.** A needed manifest version, a lease or a prepared part that cannot be read
(a request that failed after its retries, a corrupt object, a version a live checkpoint pins
that is missing) stops the pass before it deletes anything, with a typed error
(:func:`stopped`). A missing version that no checkpoint pins is the one gap that counts as
nothing: nothing can open it.

Manifest versions go too once nothing keeps them, the newest always stays, and a destroyed store
loses everything once its grace period has passed and no checkpoint is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..clock import system_clock
from ..errors import CorruptObjectError, LeveledError, ObjectStoreError
from ..files.backends import ObjectMeta
from ..files.names import (
    JOURNAL_PREFIX,
    LEASE_PREFIX,
    LEDGER_PREFIX,
    MANIFEST_PREFIX,
    journal_slot_of,
    lease_epoch_of,
    manifest_id_of,
    manifest_name,
    ulid_age,
    ulid_time,
)
from ..files.store import NotFound, ObjectStore
from ..manifest import checkpoints as cp
from ..manifest import snapshot_leases as sl
from ..manifest.deletion import Proof, deletable
from ..manifest.model import Manifest
from ..manifest.snapshot_leases import SnapshotLease
from ..manifest.store import ManifestStore
from ..manifest.txn_records import TXN_PREFIX, decode_part, txn_of_part
from ..options import Options, check_number
from .clone import detach, shares_files

#: Manifest versions a pass reads at once.
READS_AT_ONCE = 8
#: While a writer runs, a version is kept, whatever ``min_age``, until its successor is this
#: old: a writer whose cached version is older may re-create a deleted id, and it learns that
#: its version was superseded only by comparing creation times
#: (``ManifestStore.superseded``), which the object store gives in whole seconds (S3) and by
#: its own clock.
RECREATE_GUARD_S = 5.0


def check_publishable(started: float, options: Options, now: float) -> None:
    """Refuse to publish uploads begun more than half of ``gc.min_age_s`` before ``now`` (by
    the clock ``started`` was read from): GC may already treat them as orphans. The flush,
    merge or compaction is redone instead."""
    limit = options.gc.publish_window_s
    if now - started > limit:
        raise ObjectStoreError(f"outputs begun {now - started:.0f}s ago (over {limit:.0f}s) "
                               "are not published: GC may collect them", definite=True)


def named_at(paths: Iterable[str]) -> float:
    """When the oldest of ``paths`` (named by :func:`~leveled_ray.files.names.ulid`, in wall
    time) was named: the start of an upload made elsewhere (a bulk write's partitions)."""
    now = time.time()
    return now - max((ulid_age(p, now) or 0.0 for p in paths), default=0.0)


#: Versions GC keeps, and for each the kinds of file it keeps of it (``"sst"``,
#: ``"journal"``): a snapshot lease may pin one kind of a version only.
Needs = dict[int, frozenset[str]]


@dataclass(frozen=True)
class Known:
    """What a pass knows of the store beyond its listing: the newest manifest version, the
    snapshot leases (by epoch), the manifest versions it read, and which of their files it
    keeps (see :func:`needed_versions`)."""

    latest: tuple[int, Manifest]
    leases: dict[int, SnapshotLease] = field(default_factory=dict)
    versions: dict[int, Manifest] = field(default_factory=dict)
    needs: Needs = field(default_factory=dict)
    #: Files that prepared parts of cross-shard bulk writes name (installed if they commit).
    prepared: frozenset[str] = frozenset()

    def referenced(self) -> set[str]:
        """Every file a kept version lists, of the kinds it is kept for."""
        out: set[str] = set()
        for mid, manifest in self.versions.items():
            out |= referenced(manifest, self.needs.get(mid, sl.ALL))
        return out

    def tail_slots(self, now: float) -> list[tuple[int, int]]:
        """The journal slot ranges ``[first, end)`` that snapshots hold beyond their
        versions: written, but not yet recorded when the snapshot was taken."""
        return [(self.versions[mid].journal_next_slot, end) for lease in self.leases.values()
                for mid, end in sl.pins(lease, now).tails if mid in self.versions]


def needed_versions(metas: Iterable[ObjectMeta], latest: tuple[int, Manifest], now: float,
                    min_age: float, window: float,
                    leases: dict[int, SnapshotLease] | None = None) -> Needs:
    """The manifest versions GC must keep (and read), each with the kinds of file it is kept
    for: the newest, every live checkpoint's and every version younger than ``min_age``
    whole; what snapshots may read; and, while a writer runs (its lease is not closed),
    without its files, every version whose successor is younger than
    :data:`RECREATE_GUARD_S`. A snapshot lease
    (:mod:`~leveled_ray.manifest.snapshot_leases`) says that exactly, per kind. Where nothing
    better is known, every version that was current within ``window`` is kept whole: for the
    whole store when the current writer epoch has no lease, and below a lease's
    ``legacy_below`` while its legacy window lasts."""
    latest_id, manifest = latest
    leases = leases or {}
    created = sorted((manifest_id_of(m.path), m.last_modified) for m in metas
                     if manifest_id_of(m.path) is not None)
    keep: dict[int, set[str]] = {}

    def add(mid: int, kinds) -> None:
        keep.setdefault(mid, set()).update(kinds)

    for mid in {latest_id} | {c.manifest_id for c in cp.live(manifest, now)}:
        add(mid, sl.ALL)
    floors: list[tuple[str, int]] = []
    for lease in leases.values():
        pinned = sl.pins(lease, now)
        for kind, versions in pinned.versions.items():
            for mid in versions:
                add(mid, (kind,))
        if pinned.floors is not None:
            floors += zip(sl.KINDS, pinned.floors)
    current = leases.get(manifest.writer_epoch)
    writing = current is None or not current.closed  # a writer may hold an older version
    window_below = latest_id + 1 if manifest.writer_epoch not in leases else max(
        [lease.legacy_below for lease in leases.values() if sl.legacy_in_force(lease, now)],
        default=-1)
    for (mid, made), (_, successor_made) in zip(created, created[1:] + [(None, now)]):
        if now - made < min_age or (mid < window_below and now - successor_made < window):
            add(mid, sl.ALL)
        elif writing and now - successor_made < RECREATE_GUARD_S:
            add(mid, ())  # the object only: nothing reads its files
        for kind, floor in floors:
            if mid >= floor:
                add(mid, (kind,))
    return {mid: frozenset(kinds) for mid, kinds in keep.items()}


def referenced(manifest: Manifest, kinds: frozenset[str] = sl.ALL) -> set[str]:
    """The objects of ``kinds`` a manifest version reads."""
    out = {s.name for s in manifest.sst_files()} if "sst" in kinds else set()
    if "sst" in kinds and manifest.tree is not None:  # the Ledger's saved tree
        out.add(manifest.tree.name)
    return out | ({j.name for j in manifest.journal} if "journal" in kinds else set())


@dataclass
class Plan:
    """What one GC pass deletes (data files first, then leases, then manifests), why others
    stay, and what it could not find out (any doubt and it deletes nothing)."""

    files: list[str] = field(default_factory=list)
    leases: list[str] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)  # reason -> count
    doubts: tuple[str, ...] = ()
    detached: bool = False  # a clone that stopped sharing its ancestors' files
    failed: list[str] = field(default_factory=list)  # deletes the object store failed

    @property
    def paths(self) -> list[str]:
        return self.files + self.leases + self.manifests

    @property
    def deleted(self) -> list[str]:
        """The planned deletes that went through (all but ``failed``)."""
        failed = set(self.failed)
        return [p for p in self.paths if p not in failed]


def plan(metas: list[ObjectMeta], known: Known, now: float, min_age: float,
         grace: float, doubts: Iterable[str] = (), publish_window: float = 0.0) -> Plan:
    """The deletions for one pass, from a listing and what the pass read (``known``): every
    listed object is a candidate, the reasons to keep it make up the
    :class:`~leveled_ray.manifest.deletion.Proof`, and :func:`deletable` decides.
    ``publish_window``: how young an object its writer may be publishing is, while the writer
    has no lease yet (:func:`~leveled_ray.manifest.snapshot_leases.may_publish`)."""
    latest_id, manifest = known.latest
    kept: dict[str, int] = {}
    needed: set[str] = set()
    destroyed = (manifest.destroyed_at is not None and now - manifest.destroyed_at >= grace
                 and not cp.live(manifest, now))
    refs = set() if destroyed else known.referenced()
    tails = [] if destroyed else known.tail_slots(now)
    newest_lease = max(known.leases, default=None)

    def reason_to_keep(meta: ObjectMeta) -> str | None:
        path = meta.path
        mid = manifest_id_of(path)
        if destroyed:
            return "newest manifest" if mid == latest_id else None
        if mid is not None:
            if mid in known.versions or mid == latest_id:
                return "manifest in use"
            return "young" if now - meta.last_modified < min_age else None
        epoch = lease_epoch_of(path)
        if epoch is not None:
            lease = known.leases.get(epoch)
            if lease is None or epoch == newest_lease or sl.needed(lease, now):
                return "lease in force"
            return None
        if not path.startswith((LEDGER_PREFIX, JOURNAL_PREFIX)):
            return "not the store's"
        slot = journal_slot_of(path)
        if path in refs:
            return "referenced"
        if path in known.prepared:
            return "a prepared batch's"
        if slot is not None and slot >= manifest.journal_next_slot:
            return "journal tail"
        if slot is not None and any(first <= slot < end for first, end in tails):
            return "a snapshot's journal tail"
        if now - meta.last_modified < min_age:
            return "young"
        if sl.may_publish(known.leases, manifest.writer_epoch, ulid_time(path),
                          now - meta.last_modified, publish_window):
            return "its writer may publish it"
        return None

    for meta in metas:
        why = reason_to_keep(meta)
        if why is not None:
            needed.add(meta.path)
            kept[why] = kept.get(why, 0) + 1
    proof = Proof(frozenset(needed), tuple(doubts))
    out = Plan(kept=kept, doubts=proof.doubts)
    for path in deletable((m.path for m in metas), proof):
        if manifest_id_of(path) is not None:
            out.manifests.append(path)
        elif lease_epoch_of(path) is not None:
            out.leases.append(path)
        else:
            out.files.append(path)
    if destroyed and proof.certain:  # the newest manifest goes last: a half-done pass resumes
        out.manifests = sorted(out.manifests) + [manifest_name(latest_id)]
    return out


async def _read_leases(store: ObjectStore, metas: list[ObjectMeta],
                       doubts: list[LeveledError]) -> dict[int, SnapshotLease]:
    leases = {}
    for meta in metas:
        epoch = lease_epoch_of(meta.path)
        if epoch is None:
            continue
        try:
            leases[epoch] = sl.decode(await store.get_async(meta.path), meta.path)
        except NotFound:
            continue  # deleted by another pass since the listing: it pinned nothing
        except (ObjectStoreError, CorruptObjectError) as exc:
            doubts.append(exc)
    return leases


async def read_prepared(store: ObjectStore, doubts: list[LeveledError]) -> frozenset[str]:
    """The files named by the prepared parts of cross-shard bulk writes. Listed after the
    files and before the newest manifest: a part deleted in between was installed first, so
    that manifest names its files."""
    names: set[str] = set()
    for meta in await store.list_async(TXN_PREFIX):
        if txn_of_part(meta.path) is None:
            continue
        try:
            names.update(decode_part(await store.get_async(meta.path), meta.path).file_names())
        except NotFound:
            continue  # settled since the listing
        except (ObjectStoreError, CorruptObjectError) as exc:
            doubts.append(exc)
    return frozenset(names)


async def _read_versions(manifests: ManifestStore, known: Known, wanted: Iterable[int],
                         now: float, doubts: list[LeveledError]) -> bool:
    """Read the versions GC must keep into ``known.versions``. A version it cannot read is a
    doubt, except a missing one that no checkpoint pins (nothing can open it any more).
    Returns whether every wanted version was read (a clone detaches only then)."""
    latest_id, manifest = known.latest
    pinned = {c.manifest_id for c in cp.live(manifest, now)}
    known.versions[latest_id] = manifest
    reading = asyncio.Semaphore(READS_AT_ONCE)

    async def read(mid: int) -> bool:
        async with reading:
            try:  # a pinned version that is missing is damage (CorruptObjectError)
                get = manifests.read_pinned if mid in pinned else manifests.read
                known.versions[mid] = await get(mid)
                return True
            except NotFound:  # no checkpoint pins it: nothing can open it any more
                return False
            except (ObjectStoreError, CorruptObjectError) as exc:
                doubts.append(exc)
                return False

    return all(await asyncio.gather(*(read(mid) for mid in sorted(wanted)
                                      if mid != latest_id)))


def stopped(doubts: list[LeveledError]) -> LeveledError:
    """The typed error of a pass that stopped on doubt and deleted nothing: damage
    (:class:`CorruptObjectError`, naming the object) if a needed object is missing or
    unreadable, else a failed request (:class:`ObjectStoreError`, ``definite``: nothing was
    deleted, and the next pass tries again)."""
    text = "garbage collection stopped and deleted nothing: " + "; ".join(map(str, doubts[:3]))
    damage = next((d for d in doubts if isinstance(d, CorruptObjectError)), None)
    if damage is not None:
        return CorruptObjectError(damage.path, damage.offset, text)
    return ObjectStoreError(text, definite=True, path=getattr(doubts[0], "path", None))


async def collect(store: ObjectStore, options: Options, *, min_age: float | None = None,
                  dry_run: bool = False, progress=None,
                  clock: Callable[[], float] | None = None) -> Plan:
    """One GC pass over the store: list, read what must be kept, delete the rest (unless
    ``dry_run``). The listing comes first, so an object created during the pass is never in
    it; an object the manifest gained meanwhile is younger than ``min_age``.

    Any doubt (a needed manifest version or a snapshot lease that cannot be read) stops the
    pass before it deletes anything: it raises :func:`stopped`'s typed error (with
    ``dry_run``, the plan lists the doubts instead)."""
    min_age = options.gc.min_age_s if min_age is None else check_number("min_age", min_age,
                                                                         minimum=0.0)
    now = (clock or system_clock)()
    metas = [m for prefix in (MANIFEST_PREFIX, LEDGER_PREFIX, JOURNAL_PREFIX, LEASE_PREFIX)
             for m in await store.list_async(prefix)]
    doubts: list[LeveledError] = []
    prepared = await read_prepared(store, doubts)
    # The leases before the newest manifest: an upload published after the lease was read is
    # in that manifest (see snapshot_leases.may_publish).
    leases = await _read_leases(store, [m for m in metas if m.path.startswith(LEASE_PREFIX)],
                                doubts)
    manifests = ManifestStore(store)
    latest = await manifests.latest()
    if latest is None:
        return Plan()
    known = Known((latest.id, latest.manifest), leases, prepared=prepared)
    known.needs.update(needed_versions(
        [m for m in metas if m.path.startswith(MANIFEST_PREFIX)], known.latest, now, min_age,
        options.gc.long_snapshot_timeout_s, known.leases))
    complete = await _read_versions(manifests, known, known.needs, now, doubts)
    out = plan(metas, known, now, min_age, grace=min_age, doubts=map(str, doubts),
               publish_window=options.gc.publish_window_s)
    if doubts:
        if dry_run:
            return out
        raise stopped(doubts)
    if latest.manifest.parent is not None and complete and not shares_files(known.referenced()):
        out.detached = dry_run or await detach(store, options, latest.manifest)
    if not dry_run:
        await _delete(store, out, manifest_name(latest.id), progress)
    return out


async def _delete(store: ObjectStore, out: Plan, newest: str, progress) -> None:
    """Carry out a plan. A delete the object store fails is left for the next pass (every
    planned object was proven unneeded, and a delete can be repeated); the newest manifest
    (a destroyed store's last object) goes only after every other delete went through, so
    that an interrupted pass can be resumed."""
    paths = out.paths
    for n, path in enumerate(paths):
        if path == newest and out.failed:
            out.failed.append(path)
            continue
        try:
            await store.delete_async(path)
        except ObjectStoreError:
            out.failed.append(path)
        if progress is not None:
            progress(n + 1, len(paths))
