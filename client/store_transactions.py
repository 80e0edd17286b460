"""What a plain store's transactions call (see :mod:`.transaction`): their reads of versions
and their commits, each one part of the handle's coalesced calls (see :mod:`.coalesce`), so
that concurrent transactions of a process share the Bookie's calls."""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import Future
from typing import Any

from ..actors.remote import ValueBatch, call, call_read, pack
from ..codec import Change, Head, heads_of, range_check, written
from ..codec.conditions import UNKNOWN_WRITE, Depends
from ..errors import ConflictError, StoreUnavailableError
from .coalesce import Coalescer, Part
from .in_flight_writes import InFlightRead, InFlightWrites
from .transactions import Transactions


class StoreTransactions(Transactions):
    """The calls of a plain store's transactions, on its Bookie (``_actor``) through its
    coalescers of writes (``_writes``) and of reads (``_reads``)."""

    _actor: Any
    _writes: Coalescer
    _reads: Coalescer
    _in_flight_writes: InFlightWrites

    def _send_reads(self, parts: list[Part]) -> Future:
        """One Bookie call for the coalesced reads of versions of this process's transactions:
        each part's keys (``changes``) and whether it wants values (``values[0]``)."""
        ends = list(itertools.accumulate(len(part.changes) for part in parts))
        values = any(part.values[0] for part in parts)
        answer = self._actor.read_versions.remote(
            [k for part in parts for k in part.changes], values).future()
        out: Future = Future()

        def split(done) -> None:
            try:
                entries, found = done.result()
            except BaseException as exc:  # every part's: _complete unwraps it
                out.set_exception(exc)
                return
            out.set_result([(entries[start:end], None if not part.values[0]
                             else found.slice(start, end - start))
                            for part, start, end in zip(parts, [0, *ends], ends)])
        answer.add_done_callback(split)
        return out

    async def _commit_changes_async(self, changes: list[Change], values: list,
                                    ranges: list = (),
                                    reads: dict[int, InFlightRead] | None = None) -> list[int]:
        """A transaction's commit: its writes (conditional on their versions), its checks and
        the key ranges it read (``(lo, hi, found, kind, owners)``, see
        :func:`~leveled_ray.codec.range_check`), applied all or none. ``reads``: the changes
        (by index) whose keys it read from this process's commits in flight (see
        :mod:`.in_flight_writes`). Without ranges it is one part of the handle's coalesced
        writes (:mod:`.coalesce`): concurrent commits share a call and a journal write, each
        checked on its own after those before it, and later transactions of this process may
        read its writes meanwhile. Ranges (whose keys the Bookie locks) and large commits go
        alone, as one ``put_many``, once the writes they read landed."""
        nbytes = sum(c.size for c in written(changes))
        reads = reads or {}
        if not ranges and nbytes <= self._writes.max_bytes:
            in_flight = self._in_flight_writes
            token = in_flight.begin(changes, values, (r.token for r in reads.values()))
            if token is None:
                raise ConflictError("not committed: a write it read in flight did not land")
            first = None
            try:
                deps = Depends(token, tuple((i, r.token) for i, r in reads.items()))
                first = await self._writes.submit(changes, values, nbytes, deps=deps,
                                                  loop=asyncio.get_running_loop())
            finally:
                in_flight.end(token, first)
            return list(range(first, first + len(written(changes))))
        changes = list(changes)
        for i, read in reads.items():
            sqn = await self._in_flight_writes.sqn_of(read)
            changes[i] = changes[i]._replace(condition=UNKNOWN_WRITE if sqn is None else sqn)
        changes += [range_check(lo, hi, found, kind) for lo, hi, found, kind, _ in ranges]
        return await call(self._actor.put_many, pack(changes), ValueBatch.pack(values, nbytes))

    async def _read_versions_async(self, lkeys: list[bytes], values: bool
                                   ) -> tuple[list[Head | None], list[bytes | None] | None]:
        """A transaction's read of checked keys: their heads as of one moment (each SQN is
        the key's version) and, with ``values``, each version's value. One round trip."""
        try:
            entries, found = await self._reads.submit(lkeys, [values], 0,
                                                      loop=asyncio.get_running_loop())
        except StoreUnavailableError:  # the Bookie was lost: sent alone, again as need be
            entries, found = await call_read(self._actor.read_versions, lkeys, values)
        return heads_of(entries), None if found is None else found.to_pylist()

