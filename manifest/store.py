"""Reading and updating the manifest with put-if-absent (the CAS loop).

An update reads the latest version, applies a pure transition, and creates the next id; when
another writer created that id first, it reads again and re-applies the transition. The loop
itself, :func:`cas_update`, takes its I/O as arguments so it can be tested on its own.

A create always knows its own outcome (see :meth:`ObjectStore.create_or_seal_async`): a
version this writer created is never mistaken for a lost race, so a transition is never applied
twice. A create whose outcome stays unknown is sealed with the unchanged manifest, a version
that changes nothing, and the loop goes on from it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..errors import CorruptObjectError, InvalidArgumentError, ObjectStoreError
from ..files.names import MANIFEST_PREFIX, manifest_id_of, manifest_name
from ..files.outcomes import Created
from ..files.store import NotFound, ObjectStore
from .model import IDENTITY_BYTES, Manifest, check_invariants, decode, encode


class Versioned(NamedTuple):
    """A manifest and its version number (the ``id`` in its object name)."""

    id: int
    manifest: Manifest

#: Conflicts tolerated by one update before it gives up (each conflict means progress elsewhere).
MAX_CONFLICTS = 1000


async def cas_update(
    current: Versioned | None,
    read_latest: Callable[[Versioned | None], Awaitable[Versioned | None]],
    try_create: Callable[[int, Manifest, Manifest], Awaitable[Created]],
    transition: Callable[..., Manifest],
    *,
    with_id: bool = False,
    superseded: Callable[[int], Awaitable[bool]] | None = None,
    max_conflicts: int = MAX_CONFLICTS,
) -> Versioned:
    """Apply ``transition`` to the newest manifest and create the next id, retrying on conflict.

    ``current`` is the caller's last known version: used as a first guess, so an update with no
    conflict costs one create. ``try_create(id, updated, previous)`` creates version ``id`` and
    says whose version holds it; ``SEALED`` means it holds ``previous`` unchanged. Returns the
    version written, or ``current`` unchanged when the transition returns the same manifest.
    Exceptions raised by ``transition`` (for example ``FencedError``) propagate, and nothing is
    written; but a refusal is believed only on the newest version: when ``current`` was the
    caller's guess, the newest is read and the transition tried on it once more (a lease
    dropped, or a checkpoint released, since the guess). With ``with_id``, the transition is
    called as ``transition(id, manifest)``: it may pin the version it is applied to.

    Garbage collection deletes old versions, so a caller whose ``current`` is older than them
    could re-create a deleted id (SlateDB #352). So when the first guess succeeds,
    ``superseded(id)`` asks whether a newer version existed before it; if so the write is
    already superseded, and the loop goes on from the newest. (Later attempts start from a
    fresh read, which cannot be that old.)
    """
    fresh = current is None  # whether ``current`` was read as the newest
    if current is None:
        current = await read_latest(None)
        if current is None:
            raise InvalidArgumentError("no store here: the manifest does not exist")
    for attempt in range(max_conflicts + 1):
        mid, manifest = current
        try:
            updated = transition(mid, manifest) if with_id else transition(manifest)
        except Exception:
            newer = None if fresh else await read_latest(current)
            if newer is None or newer[0] == mid:
                raise
            current, fresh = newer, True
            continue
        if updated is manifest:
            return current
        check_invariants(updated, mid + 1)
        created = await try_create(mid + 1, updated, manifest)
        if created is Created.MINE:
            if attempt or superseded is None or not await superseded(mid + 1):
                return Versioned(mid + 1, updated)
            current, fresh = await read_latest(None), True  # a re-created old id: go on
            continue
        if created is Created.SEALED:  # nothing changed in that version: apply it again
            current = (mid + 1, manifest)
            continue
        newer = await read_latest(current)
        current, fresh = (newer if newer is not None else current), True
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

    async def read_pinned(self, manifest_id: int) -> Manifest:
        """A version that a checkpoint or reader pins: if it is missing, that is damage
        (:class:`CorruptObjectError` naming it), not a request a retry could mend."""
        try:
            return await self.read(manifest_id)
        except NotFound:
            name = manifest_name(manifest_id)
            raise CorruptObjectError(name, 0, "a pinned manifest version is missing from the "
                                     "object store") from None

    async def latest(self, known: Versioned | None = None) -> Versioned | None:
        """The newest version (``known`` is returned when nothing newer exists)."""
        ids = await self._list_ids(known.id if known else None)
        if not ids:
            return known
        return Versioned(ids[-1], await self.read(ids[-1]))

    async def try_create(self, manifest_id: int, manifest: Manifest) -> bool:
        """Create version ``manifest_id``: ``True`` when this call's version holds the id."""
        return await self.store.put_if_absent_async(
            manifest_name(manifest_id), encode(manifest, manifest_id), ident=IDENTITY_BYTES)

    async def create_settled(self, manifest_id: int, manifest: Manifest,
                             previous: Manifest) -> Created:
        """Create version ``manifest_id``, sealing it with ``previous`` if the outcome stays
        unknown (see :meth:`ObjectStore.create_or_seal_async`)."""
        return await self.store.create_or_seal_async(
            manifest_name(manifest_id), encode(manifest, manifest_id),
            lambda: encode(previous, manifest_id), ident=IDENTITY_BYTES)

    async def create_initial(self, manifest: Manifest) -> Versioned:
        """Create manifest 0 for a new store; if another process won, return the latest."""
        if await self.try_create(0, manifest):
            return Versioned(0, manifest)
        latest = await self.latest()
        assert latest is not None
        return latest

    async def update(self, transition: Callable[..., Manifest],
                     current: Versioned | None = None, *, with_id: bool = False) -> Versioned:
        return await cas_update(current, self.latest, self.create_settled, transition,
                                with_id=with_id, superseded=self.superseded)

    async def superseded(self, manifest_id: int) -> bool:
        """Did a version newer than ``manifest_id`` exist before it was created? (By the
        object store's own clock: a real successor is always created after it.)"""
        metas = await self.store.list_async(MANIFEST_PREFIX, offset=manifest_name(manifest_id - 1)
                                            if manifest_id else None)
        times = {manifest_id_of(m.path): m.last_modified for m in metas}
        mine = times.get(manifest_id)
        return mine is not None and any(i is not None and i > manifest_id and t < mine
                                        for i, t in times.items())

    async def all_ids(self) -> list[int]:
        return await self._list_ids(None)
