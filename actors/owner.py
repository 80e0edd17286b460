"""What the Inker and the Penciller share: each owns one kind of file, and changes the manifest
only under the writer epoch it was started with (so a fenced writer's changes fail)."""

from __future__ import annotations

import asyncio
from typing import Callable

from ..files.framing import codec_id
from ..files.store import ObjectStore
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore, Versioned
from ..options import Options


class Owner:
    def __init__(self, store: ObjectStore, options: Options, epoch: int, manifest: Versioned):
        self.store = store
        self.options = options
        self.codec = codec_id(options.compression)
        self.epoch = epoch
        self.manifests = ManifestStore(store)
        self.manifest: Versioned = manifest
        self._commit_lock = asyncio.Lock()

    async def commit(self, transition: Callable[..., Manifest], *args) -> Versioned:
        """Apply ``transition(manifest, epoch, *args)`` to the newest manifest (the CAS loop);
        raises ``FencedError`` if a newer writer has claimed the store. One commit at a time,
        so the manifest this owner holds only moves forward."""
        async with self._commit_lock:
            self.manifest = await self.manifests.update(
                lambda m: transition(m, self.epoch, *args), self.manifest
            )
            return self.manifest
