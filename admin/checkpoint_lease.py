"""A checkpoint its holder renews while it reads: a reader's own, or a bulk read's. One rule
for both (persist's reader leases): renew once a third of the lifetime has passed since the
last renewal; a renewal the object store fails is counted and tried again with backoff, and
the read goes on (two thirds of the lifetime are left); a checkpoint that is gone raises
:class:`~leveled_ray.errors.CheckpointNotFoundError`.

Renewal times are durations, measured on ``time.monotonic``; the expiry written into the
manifest comes from the store's clock.
"""

from __future__ import annotations

import time

from ..clock import Clock, system_clock
from ..errors import ObjectStoreError
from ..manifest.store import ManifestStore
from .checkpoints import refresh_checkpoint

#: A renewal is due once this share of the lifetime has passed since the last one.
RENEW_AFTER = 1 / 3


class CheckpointLease:
    """Keeps checkpoint ``checkpoint_id`` alive for ``lifetime`` seconds past each renewal."""

    def __init__(self, manifests: ManifestStore, checkpoint_id: str, lifetime: float,
                 clock: Clock = system_clock, *, renewed_at: float | None = None):
        self.manifests = manifests
        self.checkpoint_id = checkpoint_id
        self.lifetime = lifetime
        self.clock = clock
        self.failures = 0
        self._due = (time.monotonic() if renewed_at is None else renewed_at) + (
            lifetime * RENEW_AFTER)

    @property
    def due(self) -> bool:
        return time.monotonic() >= self._due

    async def keep(self) -> None:
        """Renew the checkpoint if a renewal is due (see the module docstring)."""
        if not self.due:
            return
        try:
            await refresh_checkpoint(self.manifests, self.checkpoint_id, self.lifetime,
                                     self.clock)
        except ObjectStoreError:
            self.failures += 1
            self._due = time.monotonic() + min(self.lifetime / 10,
                                               0.5 * 2 ** min(self.failures, 10))
            return
        self._due = time.monotonic() + self.lifetime * RENEW_AFTER
