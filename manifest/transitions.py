"""Pure manifest transitions: each takes a manifest and returns the next one, or raises.

The CAS loop in :mod:`.store` calls these again on the newest manifest after every conflict,
so each must be a function of its inputs alone. Each is also idempotent: when a commit failed
with an unknown outcome, the caller retries it, and a transition that already landed then
returns the manifest unchanged (so nothing is written twice).
"""

from __future__ import annotations

from ..errors import FencedError, HistoryUnavailableError, InvalidArgumentError, WrongShardError
from ..files.journal import JournalInfo
from ..files.sst import SstInfo
from .model import KeptTree, Manifest


def require_writer(manifest: Manifest, epoch: int) -> None:
    """Fencing: only the writer holding the manifest's epoch may change the store's data."""
    if manifest.writer_epoch != epoch:
        raise FencedError(
            f"writer epoch {epoch} was fenced by epoch {manifest.writer_epoch}",
            epoch=epoch, current_epoch=manifest.writer_epoch,
        )


def require_usable(manifest: Manifest) -> None:
    if manifest.split_epoch is not None:
        raise WrongShardError("this shard was split: its keys are its children's now (read "
                              "the newest shard map)")
    if manifest.destroyed_at is not None:
        raise InvalidArgumentError("the store was destroyed")
    if not manifest.initialized:
        raise InvalidArgumentError("the store's clone initialization has not finished")


def bump_epoch(manifest: Manifest) -> Manifest:
    """A new writer claims the store: every older writer is fenced from here on."""
    require_usable(manifest)
    return manifest.with_changes(writer_epoch=manifest.writer_epoch + 1)


def reclaim_epoch(manifest: Manifest, lost_epoch: int) -> Manifest:
    """Failover: a writer restarted after its process or node died claims the store again,
    but only if no one opened it meanwhile (its lost epoch is still the newest). Otherwise
    the newer writer is left alone and the restarted one is fenced, as the lost one was.
    Not idempotent, unlike the others: a claim that landed with an unknown outcome looks,
    when retried, like another writer's open, and the restarted writer stands down (fenced;
    an open takes the store over). Two writers must never both believe they hold an epoch."""
    require_usable(manifest)
    if manifest.writer_epoch != lost_epoch:
        raise FencedError(
            f"writer epoch {lost_epoch} was fenced by epoch {manifest.writer_epoch} while it "
            "was down", epoch=lost_epoch, current_epoch=manifest.writer_epoch)
    return manifest.with_changes(writer_epoch=lost_epoch + 1)


def catalog_journal(manifest: Manifest, epoch: int, files: tuple[JournalInfo, ...],
                    next_slot: int) -> Manifest:
    """Record journal files in the manifest and move the catalogued-slot boundary forward."""
    require_writer(manifest, epoch)
    return record_journal(manifest, files, next_slot)


def record_journal(manifest: Manifest, files: tuple[JournalInfo, ...],
                   next_slot: int) -> Manifest:
    """Record journal files that exist in the store's slots, without the writer: what an
    administrator does before pinning the newest version, so that it holds every
    acknowledged write. Safe beside a running writer: a slot's file only ever holds
    durable writes (a fenced writer's later writes collide with the fence), and recording is
    idempotent."""
    require_usable(manifest)
    known = {j.name for j in manifest.journal}
    added = tuple(f for f in files if f.name not in known)
    if not added and next_slot <= manifest.journal_next_slot:
        return manifest
    return manifest.with_changes(
        journal=manifest.journal + added,
        journal_next_slot=max(manifest.journal_next_slot, next_slot),
    )


def add_l0(manifest: Manifest, epoch: int, sst: SstInfo, ledger_sqn: int) -> Manifest:
    """Add an L0 file (newest first) holding every change up to ``ledger_sqn``."""
    require_writer(manifest, epoch)
    if any(f.name == sst.name for f in manifest.sst_files()):
        return manifest  # an earlier attempt landed
    levels = ((sst,) + manifest.levels[0],) + manifest.levels[1:]
    return manifest.with_changes(levels=levels, ledger_sqn=max(manifest.ledger_sqn, ledger_sqn))


def persist_ledger_sqn(manifest: Manifest, epoch: int, ledger_sqn: int) -> Manifest:
    """Raise the persisted SQN without a new file (an empty L0 memory at close)."""
    require_writer(manifest, epoch)
    if ledger_sqn <= manifest.ledger_sqn:
        return manifest
    return manifest.with_changes(ledger_sqn=ledger_sqn)


def save_tree(manifest: Manifest, epoch: int, tree: KeptTree) -> Manifest:
    """Record the Ledger's saved tictac tree (at close), if it is still of this Ledger."""
    require_writer(manifest, epoch)
    if tree.store_id != manifest.store_id or tree.ledger_sqn != manifest.ledger_sqn:
        return manifest
    return manifest.with_changes(tree=tree)


def replace_journal(manifest: Manifest, epoch: int, removed: tuple[str, ...],
                    added: tuple[JournalInfo, ...], history_sqn: int = 0,
                    now: float = 0.0) -> Manifest:
    """Journal compaction's change: the run's files out, the rewritten files in, and history
    now beginning after ``history_sqn`` at the earliest (what the rewrite dropped).

    Refused (:class:`~leveled_ray.errors.HistoryUnavailableError`) when a lease live at
    ``now`` holds a position below that: it was set after the rewrite chose what to drop."""
    require_writer(manifest, epoch)
    names = {j.name for j in manifest.journal}
    if removed and names.isdisjoint(removed) and {j.name for j in added} <= names:
        return manifest  # an earlier attempt landed
    gone = set(removed)
    if missing := gone - names:
        raise InvalidArgumentError(f"journal files left the manifest: {sorted(missing)[:3]}")
    leases = tuple(h for h in manifest.leases if h.expires_at > now)
    if held := [h.sqn for h in leases if h.sqn < history_sqn]:
        raise HistoryUnavailableError(min(held), history_sqn)
    kept = tuple(j for j in manifest.journal if j.name not in gone)
    return manifest.with_changes(
        journal=tuple(sorted(kept + tuple(added), key=lambda j: (j.min_sqn, j.slot))),
        history_sqn=max(manifest.history_sqn, history_sqn), leases=leases)


def retire_for_split(manifest: Manifest, epoch: int, now: float) -> Manifest:
    """A split's commit point: the splitter, which claimed the shard with ``epoch`` and made
    its children from it since, retires it, if no one opened it meanwhile (else
    :class:`FencedError`, and the split is abandoned). The shard is then fenced for good
    and destroyed: GC deletes its files once its checkpoints (the children's pins among
    them) are gone. Idempotent."""
    if manifest.split_epoch == epoch:
        return manifest  # an earlier attempt landed
    require_usable(manifest)
    require_writer(manifest, epoch)
    return manifest.with_changes(split_epoch=epoch, writer_epoch=epoch + 1,
                                 destroyed_at=now)


def mark_destroyed(manifest: Manifest, now: float) -> Manifest:
    """Destroy the store: fence every writer (a new epoch nobody holds) and record when, so
    GC deletes everything once the grace period has passed and no checkpoint is left."""
    if manifest.destroyed_at is not None:
        return manifest
    return manifest.with_changes(destroyed_at=now, writer_epoch=manifest.writer_epoch + 1)
