"""The snapshot registry of an owner (Penciller or Inker) and leveled's delete rule.

A snapshot registers the manifest version it reads, with a timeout. A file removed by the
manifest change that created version ``V`` may be deleted only when every live snapshot was
registered at version ``V`` or later (leveled's ``ready_to_delete``): older snapshots may still
read it. Expired registrations are dropped on every check, so a holder that died without
releasing its snapshot stops protecting files once its timeout passes.

The rule and the registry's transitions are pure functions of their inputs (including ``now``);
:class:`SnapshotRegistry` is the small stateful shell the owners keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..clock import system_clock
from ..options import check_number
from .deletion import pinned_below


@dataclass(frozen=True)
class Registration:
    """One snapshot as its owner knows it."""

    id: str
    manifest_id: int  # the manifest version the snapshot reads
    expires_at: float  # unix seconds


Registry = Mapping[str, Registration]


def register(registry: Registry, snapshot_id: str, manifest_id: int, timeout_s: float,
             now: float) -> dict[str, Registration]:
    """Add (or renew) a snapshot that reads ``manifest_id`` until ``now + timeout_s``."""
    check_number("snapshot timeout", timeout_s, minimum=0, inclusive=False)
    out = dict(registry)
    out[snapshot_id] = Registration(snapshot_id, manifest_id, now + timeout_s)
    return out


def release(registry: Registry, snapshot_id: str) -> dict[str, Registration]:
    """Remove a snapshot (releasing an unknown or expired one is not an error)."""
    out = dict(registry)
    out.pop(snapshot_id, None)
    return out


def expire(registry: Registry, now: float) -> dict[str, Registration]:
    """Only the snapshots whose timeout has not passed."""
    return {k: r for k, r in registry.items() if r.expires_at > now}


def ready_to_delete(registry: Registry, removed_in: int,
                    now: float) -> tuple[bool, dict[str, Registration]]:
    """May a file removed by manifest version ``removed_in`` be deleted now?

    Returns the answer and the registry without expired snapshots (the caller keeps that).
    """
    live = expire(registry, now)
    return not pinned_below(removed_in, (r.manifest_id for r in live.values())), live


class SnapshotRegistry:
    """The registry an owner keeps: the pure functions above, applied to its own state."""

    def __init__(self, clock: Callable[[], float] | None = None):
        self.clock = clock if clock is not None else system_clock
        self.snapshots: dict[str, Registration] = {}

    def register(self, snapshot_id: str, manifest_id: int, timeout_s: float) -> Registration:
        self.snapshots = register(self.snapshots, snapshot_id, manifest_id, timeout_s,
                                  self.clock())
        return self.snapshots[snapshot_id]

    def release(self, snapshot_id: str) -> None:
        self.snapshots = release(self.snapshots, snapshot_id)

    def ready_to_delete(self, removed_in: int) -> bool:
        ok, self.snapshots = ready_to_delete(self.snapshots, removed_in, self.clock())
        return ok

    def expire(self) -> None:
        """Drop the snapshots whose timeout has passed."""
        self.snapshots = expire(self.snapshots, self.clock())

    def versions(self) -> set[int]:
        """The manifest versions live snapshots read."""
        self.expire()
        return {r.manifest_id for r in self.snapshots.values()}

    def oldest(self) -> int | None:
        """The oldest manifest version a live snapshot reads (``None`` with no snapshots)."""
        self.snapshots = expire(self.snapshots, self.clock())
        return min((r.manifest_id for r in self.snapshots.values()), default=None)

    def __len__(self) -> int:
        return len(self.snapshots)
