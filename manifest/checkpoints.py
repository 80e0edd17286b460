"""Durable checkpoints (SlateDB): named pins of one manifest version, kept in the manifest.

A checkpoint keeps every file of the version it pins: merges and compactions may replace those
files, but they are deleted only once no live checkpoint (and no snapshot) needs them. A
checkpoint expires at ``expires_at`` (``None``: never) and is dropped from the manifest by the
next checkpoint change after that.

Every function here is pure: the CAS loop calls them again on the newest manifest after a
conflict, with the version id that manifest has.
"""

from __future__ import annotations

from ..errors import CheckpointNotFoundError, InvalidArgumentError
from ..files.names import ulid
from ..options import check_number
from .deletion import pinned_below
from .model import Checkpoint, Manifest
from .transitions import require_usable


def live(manifest: Manifest, now: float) -> tuple[Checkpoint, ...]:
    """The checkpoints that have not expired."""
    return tuple(c for c in manifest.checkpoints if c.expires_at is None or c.expires_at > now)


def find(manifest: Manifest, checkpoint_id: str, now: float) -> Checkpoint:
    for c in live(manifest, now):
        if c.id == checkpoint_id:
            return c
    raise CheckpointNotFoundError(f"no live checkpoint {checkpoint_id!r}")


def check_lifetime(lifetime: float | None) -> None:
    if lifetime is not None:
        check_number("lifetime", lifetime, minimum=0, inclusive=False)


def check_checkpoint_id(checkpoint_id: str | None) -> None:
    if checkpoint_id is not None and (not isinstance(checkpoint_id, str) or not checkpoint_id):
        raise InvalidArgumentError(f"checkpoint_id must be a non-empty str or None, not "
                                   f"{checkpoint_id!r}")


def new_checkpoint(lifetime: float | None, name: str | None, now: float,
                   checkpoint_id: str | None = None) -> Checkpoint:
    """A checkpoint not yet placed: its version is set by :func:`add_checkpoint`. Its id is a
    new ULID, or ``checkpoint_id`` (a checkpoint made again with the id of a live one is that
    one: a retry's)."""
    check_lifetime(lifetime)
    check_checkpoint_id(checkpoint_id)
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"checkpoint name must be a non-empty str, not {name!r}")
    return Checkpoint(id=checkpoint_id or ulid(), manifest_id=-1,
                      expires_at=None if lifetime is None else now + lifetime,
                      created_at=now, name=name)


def add_checkpoint(manifest_id: int, manifest: Manifest, checkpoint: Checkpoint,
                   source: str | None, now: float) -> Manifest:
    """Pin ``manifest_id`` (the version this is applied to), or the version of the live
    checkpoint ``source``. Expired checkpoints are dropped on the way. A shard a split
    retired takes only copies: its checkpoints stay readable, and a copy (a clone's pin of a
    checkpoint taken before the split) pins no version the checkpoint does not."""
    if source is None or manifest.split_epoch is None:
        require_usable(manifest)
    if any(c.id == checkpoint.id for c in manifest.checkpoints):
        return manifest  # an earlier attempt landed
    pinned = manifest_id if source is None else find(manifest, source, now).manifest_id
    placed = Checkpoint(checkpoint.id, pinned, checkpoint.expires_at, checkpoint.created_at,
                        checkpoint.name)
    return manifest.with_changes(checkpoints=live(manifest, now) + (placed,))


def refresh_checkpoint(manifest: Manifest, checkpoint_id: str, lifetime: float | None,
                       now: float) -> Manifest:
    """Give a live checkpoint a new expiry: ``now + lifetime`` (``None``: never)."""
    check_lifetime(lifetime)
    old = find(manifest, checkpoint_id, now)
    new = Checkpoint(old.id, old.manifest_id, None if lifetime is None else now + lifetime,
                     old.created_at, old.name)
    return manifest.with_changes(
        checkpoints=tuple(new if c.id == checkpoint_id else c for c in live(manifest, now)))


def delete_checkpoint(manifest: Manifest, checkpoint_id: str, now: float) -> Manifest:
    find(manifest, checkpoint_id, now)
    return manifest.with_changes(
        checkpoints=tuple(c for c in live(manifest, now) if c.id != checkpoint_id))


def blocks_delete(manifest: Manifest, removed_in: int, now: float) -> bool:
    """Does a live checkpoint pin a version older than ``removed_in`` (one that still holds a
    file removed by version ``removed_in``)?"""
    return pinned_below(removed_in, (c.manifest_id for c in live(manifest, now)))
