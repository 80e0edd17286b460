"""Checkpoints on a store URL, with or without the store running.

They change only the manifest's checkpoints and its record of journal files, with the CAS loop,
so they never fence the store's writer, and a running store keeps every checkpoint made this way.
A checkpoint (and so a reader's pin, and a clone) first records the journal files written since
the newest manifest recorded them, so it holds every write acknowledged before the call, even
while the store runs.
"""
from __future__ import annotations

import contextlib

from ..clock import Clock, system_clock
from ..errors import CheckpointNotFoundError, InvalidArgumentError
from ..files.journal_slots import slot_info, tail_slots
from ..manifest import checkpoints as cp
from ..manifest.model import Checkpoint
from ..manifest.store import ManifestStore, Versioned
from ..manifest.transitions import record_journal


async def record_tail(manifests: ManifestStore, current: Versioned | None = None) -> Versioned:
    """Record the journal files written since the newest version recorded them (a running
    writer records them every ``catalog_s``), so that the newest version holds every write
    acknowledged so far. Returns that version, read or written just now."""
    latest = await manifests.latest(current)
    if latest is None:
        raise InvalidArgumentError(f"no store at {manifests.store.url}")
    store = manifests.store
    tail = [await slot_info(store, s) for s in await tail_slots(store,
                                                                 latest.manifest.journal_next_slot)]
    if not tail:
        return latest
    next_slot = tail[-1].slot + 1
    return await manifests.update(lambda m: record_journal(m, tuple(tail), next_slot), latest)


async def create_checkpoint(manifests: ManifestStore, lifetime: float | None = None,
                            name: str | None = None, source: str | None = None,
                            current: Versioned | None = None,
                            clock: Clock = system_clock,
                            checkpoint_id: str | None = None) -> Checkpoint:
    """Add a checkpoint pinning the newest version (at or after ``current``, and after
    recording the journal tail: every acknowledged write is in it), or the version of the
    checkpoint ``source``. ``checkpoint_id`` gives it that id (every shard's part of a
    sharded store's checkpoint has the same)."""
    new = cp.new_checkpoint(lifetime, name, clock(), checkpoint_id)
    if source is None:
        current = await record_tail(manifests, current)
    _, m = await manifests.update(
        lambda mid, m: cp.add_checkpoint(mid, m, new, source, clock()), current,
        with_id=True)
    return cp.find(m, new.id, clock())


async def refresh_checkpoint(manifests: ManifestStore, checkpoint_id: str,
                             lifetime: float | None, clock: Clock = system_clock) -> Checkpoint:
    _, m = await manifests.update(
        lambda m: cp.refresh_checkpoint(m, checkpoint_id, lifetime, clock()))
    return cp.find(m, checkpoint_id, clock())


async def delete_checkpoint(manifests: ManifestStore, checkpoint_id: str,
                            clock: Clock = system_clock) -> None:
    await manifests.update(lambda m: cp.delete_checkpoint(m, checkpoint_id, clock()))


async def release_checkpoint(manifests: ManifestStore, checkpoint_id: str,
                             clock: Clock = system_clock) -> None:
    """Delete a checkpoint its holder is done with; one that expired or was deleted
    already needs nothing more."""
    with contextlib.suppress(CheckpointNotFoundError):
        await delete_checkpoint(manifests, checkpoint_id, clock)


async def list_checkpoints(manifests: ManifestStore, clock: Clock = system_clock,
                           current: Versioned | None = None) -> list[Checkpoint]:
    """The live checkpoints of the newest version (at or after ``current``)."""
    latest = await manifests.latest(current)
    return [] if latest is None else list(cp.live(latest.manifest, clock()))
