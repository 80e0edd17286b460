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
from ..errors import CorruptObjectError, ObjectStoreError
from ..files.clerk import ClerkHost
from ..files.store import ObjectStore
from ..manifest.deletion import Proof, deletable
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
        self.counters = {"files_deleted": 0, "reaper_failures": 0, "reaper_sweeps": 0}

    async def sweep(self) -> bool:
        """One pass over the files waiting for deletion, one question per manifest version;
        whether it deleted any. A file goes only when its proof is certain: no read of an
        older view runs here, and its owner answered that nothing needs it (an owner that
        failed to answer is a doubt: the file is kept). The deletes go ``DELETES_AT_ONCE`` at
        a time: a merge of small journal files retires a thousand files at once."""
        waiting: dict[tuple[str, int], list] = {}
        for clerk in self.host.pending_deletes():
            waiting.setdefault((clerk.kind, clerk.removed_in), []).append(clerk)
        ready = []
        for (kind, removed_in), clerks in waiting.items():
            proof = await self._prove(kind, removed_in, clerks)
            names = set(deletable((c.name for c in clerks), proof))
            ready += [c for c in clerks if c.name in names]
        deleted = []
        for i in range(0, len(ready), DELETES_AT_ONCE):
            deleted += await asyncio.gather(*map(self._delete, ready[i : i + DELETES_AT_ONCE]))
        self.counters["reaper_sweeps"] += 1
        return any(deleted)

    async def _prove(self, kind: str, removed_in: int, clerks: list) -> Proof:
        """What is known of the files that version ``removed_in`` removed: those a running
        read of an older view uses are needed, and all are when the owner says a snapshot or
        checkpoint reads an older version; an owner that did not answer is a doubt."""
        if self.host.readers_before(removed_in):
            return Proof().need(c.name for c in clerks)
        try:
            free = await self.may_delete(kind, removed_in)
        except Exception as exc:
            self.counters["reaper_failures"] += 1
            return Proof().doubt(f"the {kind} owner did not answer: {exc}")
        return Proof() if free else Proof().need(c.name for c in clerks)

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


async def gc_loop(store: ObjectStore, options: Options, counters: dict,
                  prepare: Callable[[], Awaitable[None]], clock: Callable[[], float]) -> None:
    """Garbage collection every ``gc.interval_s``, after ``prepare()`` (the Bookie brings its
    snapshot lease up to date). Counts what it deleted, its failures, and the passes that
    stopped on doubt (``gc_stopped``: they deleted nothing)."""
    interval = options.gc.interval_s
    while interval > 0:
        await asyncio.sleep(interval)
        try:
            await prepare()
            plan = await gc.collect(store, options, clock=clock)
            counters["gc_deleted"] += len(plan.deleted)
            counters["gc_failed_deletes"] += len(plan.failed)  # tried again next pass
        except (ObjectStoreError, CorruptObjectError) as exc:
            counters["gc_stopped"] += 1
            counters["gc_stopped_reason"] = str(exc)
            log.warning("garbage collection stopped on doubt and deleted nothing: %s", exc)
        except Exception:
            counters["gc_failures"] += 1
            log.warning("garbage collection failed; the next pass tries again", exc_info=True)
