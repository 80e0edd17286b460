"""History leases on a store URL, with or without the store running: like checkpoints, they
change only the manifest's lease list with the CAS loop, so they never fence the writer, and
journal compaction reads them from the newest manifest (see
:mod:`leveled_ray.manifest.history`)."""

from __future__ import annotations

from ..clock import Clock, system_clock
from ..manifest import history
from ..manifest.model import HistoryLease
from ..manifest.store import ManifestStore


async def set_lease(manifests: ManifestStore, name: str, sqn: int, lifetime: float,
                    clock: Clock = system_clock) -> HistoryLease:
    """Hold every change after ``sqn`` for ``lifetime`` seconds (create or move ``name``)."""
    m = await manifests.update(lambda m: history.set_lease(m, name, sqn, lifetime, clock()))
    return next(h for h in m.manifest.leases if h.name == name)


async def drop_lease(manifests: ManifestStore, name: str, clock: Clock = system_clock) -> None:
    await manifests.update(lambda m: history.drop_lease(m, name, clock()))


async def list_leases(manifests: ManifestStore,
                      clock: Clock = system_clock) -> list[HistoryLease]:
    latest = await manifests.latest()
    return [] if latest is None else list(history.live_leases(latest.manifest, clock()))
