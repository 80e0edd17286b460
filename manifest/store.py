"""Reading and updating the manifest with put-if-absent (the CAS loop).

An update reads the latest version, applies a pure transition, and creates the next id; when
another writer created that id first, it reads again and re-applies the transition. The loop
itself, :func:`cas_update`, takes its I/O as arguments so it can be tested on its own.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from ..errors import InvalidArgumentError, ObjectStoreError
from ..files.names import MANIFEST_PREFIX, manifest_id_of, manifest_name
from ..files.store import ObjectStore
from .model import Manifest, decode, encode

Versioned = tuple[int, Manifest]

#: Conflicts tolerated by one update before it gives up (each conflict means progress elsewhere).
MAX_CONFLICTS = 1000


async def cas_update(
    current: Versioned | None,
    read_latest: Callable[[Versioned | None], Awaitable[Versioned | None]],
    try_create: Callable[[int, Manifest], Awaitable[bool]],
    transition: Callable[[Manifest], Manifest],
    *,
    max_conflicts: int = MAX_CONFLICTS,
) -> Versioned:
    """Apply ``transition`` to the newest manifest and create the next id, retrying on conflict.

    ``current`` is the caller's last known version: used as a first guess, so an update with no
    conflict costs one create. Returns the version written, or ``current`` unchanged when the
    transition returns the same manifest. Exceptions raised by ``transition`` (for example
    ``FencedError``) propagate, and nothing is written.
    """
    if current is None:
        current = await read_latest(None)
        if current is None:
            raise InvalidArgumentError("no store here: the manifest does not exist")
    for attempt in range(max_conflicts + 1):
        mid, manifest = current
        updated = transition(manifest)
        if updated is manifest:
            return current
        if await try_create(mid + 1, updated):
            return mid + 1, updated
        newer = await read_latest(current)
        current = newer if newer is not None else current
        if attempt > 3:  # a busy manifest: back off a little, with jitter
            await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * attempt)))
    raise ObjectStoreError(f"manifest update lost {max_conflicts} races in a row", definite=True)


class ManifestStore:
    """The manifest objects of one store."""

    def __init__(self, store: ObjectStore):
        self.store = store

    async def _list_ids(self, after: int | None) -> list[int]:
        offset = manifest_name(after) if after is not None else None
        metas = await self.store.list_async(MANIFEST_PREFIX, offset=offset)
        ids = [manifest_id_of(m.path) for m in metas]
        return sorted(i for i in ids if i is not None and (after is None or i > after))

    async def read(self, manifest_id: int) -> Manifest:
        name = manifest_name(manifest_id)
        return decode(await self.store.get_async(name), name, manifest_id)

    async def latest(self, known: Versioned | None = None) -> Versioned | None:
        """The newest version (``known`` is returned when nothing newer exists)."""
        ids = await self._list_ids(known[0] if known else None)
        if not ids:
            return known
        return ids[-1], await self.read(ids[-1])

    async def try_create(self, manifest_id: int, manifest: Manifest) -> bool:
        return await self.store.put_if_absent_async(
            manifest_name(manifest_id), encode(manifest, manifest_id)
        )

    async def create_initial(self, manifest: Manifest) -> Versioned:
        """Create manifest 0 for a new store; if another process won, return the latest."""
        if await self.try_create(0, manifest):
            return 0, manifest
        latest = await self.latest()
        assert latest is not None
        return latest

    async def update(self, transition: Callable[[Manifest], Manifest],
                     current: Versioned | None = None) -> Versioned:
        return await cas_update(current, self.latest, self.try_create, transition)

    async def all_ids(self) -> list[int]:
        return await self._list_ids(None)
