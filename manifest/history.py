"""How much history the Journal holds, and who holds it there: pure functions.

The Journal keeps every change by SQN until journal compaction drops replaced entries. The
manifest's ``history_sqn`` (``H``) says what is still whole: every change with an SQN above
``H`` is in the Journal with its value, and so, for every SQN ``s >= H`` and every key, is the
key's newest change at or below ``s``. So the changes after any ``s >= H`` are exact, and so is
the store as it was at ``s``; below ``H`` they are refused with
:class:`~leveled_ray.errors.HistoryUnavailableError`.

Compaction moves ``H`` up as it drops entries (see
:func:`~leveled_ray.manifest.journal_compaction.plan_rewrite`), unless something
*protects* them: a **history lease** (persist's reader leases: a consumer's position, kept in
the manifest with an expiry its holder renews) keeps every change after its SQN, and
``Options.history_s`` keeps every change of its window.
"""

from __future__ import annotations

from ..errors import HistoryUnavailableError, InvalidArgumentError
from ..options import check_number
from .model import HistoryLease, Manifest
from .transitions import require_usable

#: The longest a lease name may be (it is kept in every manifest version).
MAX_LEASE_NAME = 200


def check_position(after) -> int:
    """An SQN position: an int >= 0 (0: from the first change)."""
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise InvalidArgumentError(f"a position must be an SQN (an int >= 0), not {after!r}")
    return after


def check_covered(history_sqn: int, after: int) -> None:
    """Refuse a position that history no longer covers."""
    if after < history_sqn:
        raise HistoryUnavailableError(after, history_sqn)


def live_leases(manifest: Manifest, now: float) -> tuple[HistoryLease, ...]:
    return tuple(lease for lease in manifest.leases if lease.expires_at > now)


def set_lease(manifest: Manifest, name: str, sqn: int, lifetime: float,
              now: float) -> Manifest:
    """Create lease ``name`` at ``sqn``, or move it (either way), expiring ``lifetime``
    seconds from ``now``. Refused below ``history_sqn``: those changes are gone already.
    Expired leases are dropped on the way."""
    require_usable(manifest)
    if not isinstance(name, str) or not name or len(name) > MAX_LEASE_NAME:
        raise InvalidArgumentError(f"a lease name must be a non-empty str of at most "
                                   f"{MAX_LEASE_NAME} characters, not {name!r}")
    check_position(sqn)
    check_number("lifetime", lifetime, minimum=0, inclusive=False)
    check_covered(manifest.history_sqn, sqn)
    kept = tuple(lease for lease in live_leases(manifest, now) if lease.name != name)
    return manifest.with_changes(leases=kept + (HistoryLease(name, sqn, now + lifetime),))


def drop_lease(manifest: Manifest, name: str, now: float) -> Manifest:
    """Remove lease ``name`` (nothing changes when it is absent or expired)."""
    kept = tuple(lease for lease in live_leases(manifest, now) if lease.name != name)
    if kept == manifest.leases:
        return manifest
    return manifest.with_changes(leases=kept)


def window_sqn(written: list[tuple[float, int]], now: float, history_s: float) -> int | None:
    """The SQN the ``history_s`` window begins after: ``written`` holds each journal file's
    ``(time it was written, its highest SQN)``. Every change above the result was written
    within the window (``None``: no window)."""
    if history_s <= 0:
        return None
    older = [sqn for at, sqn in written if at < now - history_s]
    return max(older, default=0)


def protected_sqn(manifest: Manifest, now: float, window_sqn: int | None) -> int | None:
    """Compaction keeps every change above this SQN (``None``: nothing is protected): the
    lowest live lease, or the first SQN of the ``history_s`` window (``window_sqn``)."""
    found = [lease.sqn for lease in live_leases(manifest, now)]
    if window_sqn is not None:
        found.append(window_sqn)
    return min(found) if found else None
