"""Deleting files no one reads any more: the Bookie's reaper (leveled's ``delete_pending``)
and its GC loop.

A file that a committed manifest change removed is *retired* by its clerk and waits in
``delete_pending``. The reaper deletes it once no read in this process started on an older
view and its owner (the Penciller for SSTs, the Inker for journal files) answers that no
snapshot needs that manifest version. GC is the backstop for the files no clerk will delete.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..admin import gc
from ..errors import ObjectStoreError
from ..files.clerk import ClerkHost
from ..files.store import ObjectStore
from ..options import Options

log = logging.getLogger(__name__)

#: Polling the owners: from this delay, doubling while nothing can be deleted, up to the cap.
FIRST_DELAY_S, MAX_DELAY_S = 0.05, 2.0
#: Deletes in flight at once.
DELETES_AT_ONCE = 16


class Reaper:
    """Deletes the retired files of a :class:`~leveled_ray.files.clerk.ClerkHost`.
    ``may_delete(kind, version)`` asks the owner of that kind of file (``"sst"`` or
    ``"journal"``) whether no snapshot needs the manifest version that removed it."""

    def __init__(self, host: ClerkHost, may_delete: Callable[[str, int], Awaitable[bool]]):
        self.host = host
        self.may_delete = may_delete
        self.wake = asyncio.Event()
        self.counters = {"files_deleted": 0, "reaper_failures": 0}

    async def sweep(self) -> bool:
        """One pass over the files waiting for deletion, one question per manifest version;
        whether it deleted any. The deletes go ``DELETES_AT_ONCE`` at a time: a merge of small
        journal files retires a thousand files at once."""
        answers: dict[tuple[str, int], bool] = {}
        ready = []
        for clerk in self.host.pending_deletes():
            if self.host.readers_before(clerk.removed_in):
                continue  # a read of an older view may still need it
            question = (clerk.kind, clerk.removed_in)
            if question not in answers:
                try:
                    answers[question] = await self.may_delete(*question)
                except Exception:
                    self.counters["reaper_failures"] += 1
                    answers[question] = False
            if answers[question]:
                ready.append(clerk)
        deleted = []
        for i in range(0, len(ready), DELETES_AT_ONCE):
            deleted += await asyncio.gather(*map(self._delete, ready[i : i + DELETES_AT_ONCE]))
        return any(deleted)

    async def _delete(self, clerk) -> bool:
        try:
            await clerk.delete()
        except ObjectStoreError:
            self.counters["reaper_failures"] += 1
            return False  # tried again next round; GC is the backstop
        self.counters["files_deleted"] += 1
        return True

    async def run(self) -> None:
        """Sweep while files wait, with backoff; sleep until woken when none do."""
        delay = FIRST_DELAY_S
        while True:
            if not self.host.pending_deletes():
                self.wake.clear()
                await self.wake.wait()
                delay = FIRST_DELAY_S
                continue
            delay = FIRST_DELAY_S if await self.sweep() else min(delay * 2, MAX_DELAY_S)
            await asyncio.sleep(delay)


async def gc_loop(store: ObjectStore, options: Options, counters: dict) -> None:
    """Garbage collection every ``gc_interval_s``; counts what it deleted and its failures."""
    interval = options.gc_interval_s
    while interval > 0:
        await asyncio.sleep(interval)
        try:
            plan = await gc.collect(store, options)
            counters["gc_deleted"] += len(plan.paths)
        except Exception:
            counters["gc_failures"] += 1
            log.warning("garbage collection failed; the next pass tries again", exc_info=True)
