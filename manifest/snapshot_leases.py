"""Snapshot leases: what a running writer tells GC about the manifest versions it may read.

Snapshots register with their owner, in memory, so GC (which may run in any process, without
Ray) cannot ask the registry. Instead each writer keeps one small object,
``leases/snapshots-<epoch>``, written with a plain put (only that writer writes it):

* While it runs, the lease says ``floors``: for each kind of file (SSTs, journal files), the
  oldest version whose files of that kind this writer's current view, and the reads running on
  it, use. The Bookie's Ledger view and journal view move separately, each at the version of
  its owner's last change it adopted. No later snapshot reads an older version: a snapshot
  reads the writer's current views, and views only move forward. The lease also lists the
  versions its live snapshots read, with their expiries, and for each the journal slots it
  holds beyond its version's (``slots_below``): journal files written but not yet recorded in
  the manifest when it was taken, which a later version records and journal compaction may
  then replace. The writer writes the lease again when any of these change, and at least
  every ``renew_s``, and takes no snapshot while it is stale.
* When the writer closes, the lease has no floors: it lists the snapshots that may still be
  read (a pickled snapshot reads until its timeout), and nothing else.
* A lease that stopped being renewed (its writer crashed or lost the object store) keeps its
  floors until every snapshot the writer could have taken has timed out: ``written_at`` plus
  ``STALE_RENEWALS`` renewals plus ``max_timeout_s``.

GC then keeps exactly the files leases pin, instead of every version current within
``long_snapshot_timeout_s``. That window is kept only where nothing better is known: when the
current writer epoch has no lease (a store last opened by a version without leases, or a writer
still opening), and, for ``legacy_until``, for the versions older than ``legacy_below`` that a
writer without leases may have handed to its snapshots before this writer fenced it.

Every function here is pure; times are Unix seconds from the writer's and GC's clocks, as for
checkpoint expiry.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..errors import CorruptObjectError

#: A lease not renewed for this many periods is stale: its writer takes no new snapshot.
STALE_RENEWALS = 3
FORMAT = 1


#: The kinds of file a lease speaks of: Ledger SSTs (the Penciller's) and journal files (the
#: Inker's). A view of each is at its own version, so each kind has its own floor.
KINDS = ("sst", "journal")
ALL = frozenset(KINDS)


@dataclass(frozen=True)
class SnapshotLease:
    """The lease of one writer epoch (see the module docstring). ``floors`` and each
    snapshot's versions are per kind, in the order of :data:`KINDS`."""

    epoch: int
    written_at: float
    renew_s: float
    max_timeout_s: float
    floors: tuple[int, int]
    closed: bool = False
    #: (sst version, journal version, slots_below, expiry) of live snapshots
    snapshots: tuple[tuple[int, int, int, float], ...] = ()
    legacy_below: int = -1
    legacy_until: float = 0.0
    #: How long after it began an upload this writer may still publish it (its flushes',
    #: merges' and compactions' outputs), and no upload it may still publish began before
    #: ``uploads_since``: see :func:`may_publish`.
    publish_s: float = 0.0
    uploads_since: float | None = None

    def fresh(self, now: float) -> bool:
        """Renewed recently enough that its writer may still take snapshots under it."""
        return not self.closed and now <= self.written_at + STALE_RENEWALS * self.renew_s


def encode(lease: SnapshotLease) -> bytes:
    return json.dumps({"format": FORMAT, **asdict(lease)}, sort_keys=True).encode()


def decode(data: bytes, path: str) -> SnapshotLease:
    """The lease in ``data``; :class:`CorruptObjectError` if it is not one."""
    try:
        raw = json.loads(data)
        if raw.pop("format") != FORMAT:
            raise ValueError("unknown format")
        ledger, journal = raw["floors"]
        raw["floors"] = (int(ledger), int(journal))
        raw["snapshots"] = tuple((int(a), int(b), int(c), float(t))
                                 for a, b, c, t in raw["snapshots"])
        return SnapshotLease(**raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptObjectError(path, 0, f"not a snapshot lease: {exc}") from None


@dataclass(frozen=True)
class Pins:
    """What a lease needs kept now: for each kind, every version from its floor on (none when
    ``floors`` is ``None``); the versions in ``versions`` (kind -> versions); and for each
    ``(journal version, slots_below)`` in ``tails``, the journal slots from that version's
    ``journal_next_slot`` up to ``slots_below``."""

    floors: tuple[int, int] | None
    versions: dict[str, frozenset[int]]
    tails: frozenset[tuple[int, int]] = frozenset()

    @property
    def empty(self) -> bool:
        return self.floors is None and not any(self.versions.values())


def pins(lease: SnapshotLease, now: float) -> Pins:
    """What ``lease`` needs kept at ``now``."""
    live = [s for s in lease.snapshots if s[3] > now]
    versions = {kind: frozenset(s[i] for s in live) for i, kind in enumerate(KINDS)}
    tails = frozenset((s[1], s[2]) for s in live)
    if lease.closed:
        return Pins(None, versions, tails)
    until = lease.written_at + STALE_RENEWALS * lease.renew_s + lease.max_timeout_s
    return Pins(lease.floors if now < until else None, versions, tails)


#: How far the clock of a process that names a writer's outputs (a clerk, maybe on another
#: node) may lag the writer's.
CLOCK_SKEW_S = 1.0


def may_publish(leases: dict[int, SnapshotLease], writer_epoch: int, named_at: float | None,
                age: float, fallback_s: float) -> bool:
    """Whether a writer may still publish an unreferenced object ``age`` seconds old, named at
    ``named_at`` (wall time, from its ULID name; ``None`` for other names): GC keeps it,
    whatever ``min_age`` it was given.

    A lease says ``uploads_since`` (wall time): no upload its writer was writing then, or
    began later, began earlier (flushes, merges, compactions, and bulk writes begun through
    it, whose commits a later writer of the store may install), and outputs are named after
    they begin. GC reads the leases before the newest manifest, so an upload published after
    the lease it read was written is either named after ``uploads_since`` or in that
    manifest. A closed lease says it only while bulk writes begun through its writer are
    pending. Journal files named by slot are the journal tail's rule. While the newest
    manifest's writer (``writer_epoch``) has no lease (it is opening, or predates leases),
    every object younger than ``fallback_s`` may be its upload."""
    if writer_epoch > 0 and writer_epoch not in leases:  # epoch 0: never opened
        return age < fallback_s
    return named_at is not None and any(
        lease.uploads_since is not None and age < lease.publish_s
        and named_at >= lease.uploads_since - CLOCK_SKEW_S for lease in leases.values())


def legacy_in_force(lease: SnapshotLease, now: float) -> bool:
    return lease.legacy_below >= 0 and now < lease.legacy_until


def needed(lease: SnapshotLease, now: float) -> bool:
    """Is the lease object itself still needed? (While it pins anything, or its legacy
    window is in force; GC also keeps the newest lease whatever it says.)"""
    return (not pins(lease, now).empty or legacy_in_force(lease, now)
            or (lease.uploads_since is not None and now < lease.uploads_since + lease.publish_s))


def snapshot_versions(registrations) -> tuple[tuple[int, int, int, float], ...]:
    """Live snapshots as a lease lists them (``registrations`` of ``(sst version, journal
    version, slots_below, expires_at)``): each distinct pin once, with its latest expiry."""
    out: dict[tuple[int, int, int], float] = {}
    for *pin, expires in registrations:
        out[tuple(pin)] = max(out.get(tuple(pin), 0.0), expires)
    return tuple((*pin, t) for pin, t in sorted(out.items()))
