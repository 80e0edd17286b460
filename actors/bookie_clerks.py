"""The Bookie's clerks: the Penciller's merges and the Inker's journal compactions each run in an
actor of their own, off the Bookie's process, started by the first work that needs it (each actor
costs a process to start and to stop). The Penciller lives in the Bookie's process, so the merge
clerk asks the Bookie for its work, and the Bookie hands the calls on."""

from __future__ import annotations

from ..errors import StoreClosedError
from ..manifest.levels import MergeJob
from .iclerk import InkerClerk
from .pclerk import PencillerClerk
from .remote import call, made, self_handle, spawn


class Clerks:
    """Part of :class:`.bookie.Bookie`: starting its clerks, and the merge clerk's calls."""

    def _merge_clerk(self):
        """The Penciller's merge clerk, started when a merge first comes due: until then its
        process would wait (a store's first file comes after ``push_keys`` changes, or with a
        bulk write; a store reopened with its levels within their sizes has nothing to merge
        until a flush)."""
        if self.pclerk is None and not self.closing:
            self.pclerk = spawn(PencillerClerk, "pclerk", self.local, self.name, self.store,
                                self.options, self.clock, self_handle(self, self.local))
            self.clerks_made["pclerk"] = made(self.pclerk, self.local)
            self._merges = self.pclerk.run.remote()  # polls for merges until stopped
        return self.pclerk

    def _compaction_clerk(self):
        """The Inker's clerk, started when the first journal compaction needs it: most
        stores compact rarely (hourly by default)."""
        if self.iclerk is None:
            self.iclerk = spawn(InkerClerk, "iclerk", self.local, self.name, self.store,
                                self.options, self_handle(self, self.local))
            self.clerks_made["iclerk"] = made(self.iclerk, self.local)
        return self.iclerk

    async def clerk_stats(self, role: str, before: dict) -> dict:
        """The ``stats()`` of the clerk ``role`` ("pclerk" or "iclerk"), or ``before`` while
        it has none, marked ``starting`` while its process starts: a call would wait for
        that, and the first ``stats()`` of a Bookie restarted on a loaded node would come
        seconds after it serves again."""
        clerk = getattr(self, role)
        if clerk is None:
            return dict(before)
        if not self.clerks_made[role].done():
            return {**before, "starting": True}
        return await call(clerk.stats)

    async def _stop_merges(self) -> None:
        """Stop the merge clerk at once, at close: a clerk still starting is not waited for,
        and a merge in flight is refused when done (:meth:`merge_done`; GC deletes its
        files as orphans)."""
        if self.local:
            await call(self.pclerk.stop)
        else:
            import ray

            ray.kill(self.pclerk, no_restart=True)

    def clerks(self) -> list:
        """The clerks running now (Ray handles, or local ones without Ray)."""
        return [clerk for clerk in (self.pclerk, self.iclerk) if clerk is not None]

    # -- the merge clerk's calls on the Penciller ------------------------------------------------

    async def merge_work(self, wait_s: float = 0.0) -> MergeJob | None:
        """The next merge for the clerk, or ``None``; with ``wait_s``, a long poll (see
        :meth:`.penciller.Penciller.wait_merge_work`)."""
        return await self.penciller.wait_merge_work(wait_s)

    async def merge_done(self, job: MergeJob, outputs: tuple) -> int:
        if self.closing:
            self.counters["merges_refused"] += 1
            raise StoreClosedError("the store is closing: the merge is not committed")
        return await self.penciller.merge_done(job, outputs)

    def merge_failed(self, job: MergeJob, error: str) -> None:
        self.penciller.merge_failed(job, error)
