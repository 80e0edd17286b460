"""``lr.replicate(source, target_url)``: keep a second store in sync with a running one.

**Real time.** A listener on the source's change feed (named, so its history lease keeps the
changes it has not read) hands each change out once, in SQN order; each batch is written to
the target as one atomic ``put_many`` together with the position after it
(:mod:`.rules`). A replicator that dies and starts again reads that position back from the
target and resumes there: no change is applied twice, none is skipped, and each key's
changes land in their order.

**Full sync.** Every ``full_sync_s`` seconds (and on :meth:`Replication.full_sync`), a
tictac compare (:func:`~leveled_ray.admin.compare.compare_views`) of the source as of the
position (a snapshot at that SQN, which the listener's lease keeps) and the target finds
what the stream missed, and repairs it: the source's object is copied, or the target's
deleted. An object on the target that the replicator did not write (it lacks the
:data:`~.rules.MARK` in its metadata) is never overwritten: the full sync reports it in
``stats()["foreign"]``.

:class:`Replication` is the loop, a plain object; :func:`replicate` runs it in a Ray actor
that Ray restarts if its process dies (it resumes from the target).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

from ..admin.compare import compare_views
from ..clock import Clock, system_clock
from ..codec import Delete, Put
from ..errors import InvalidArgumentError, LeveledError
from ..read.changes import Change, shard_positions
from .rules import BUCKET, MARK, advance, position_of, position_write, repairs, write_of

#: Changes written to the target in one ``put_many`` (with their position).
BATCH = 500
#: How long one poll of the source waits for changes.
POLL_S = 1.0


class Replication:
    """Replicates ``source`` (a running store's handle, plain or sharded) into ``target`` (a
    running store's handle) under ``name``; see the module docstring."""

    def __init__(self, source, target, name: str, *, full_sync_s: float = 3600.0,
                 lifetime: float = 600.0, clock: Clock = system_clock):
        self.source, self.target, self.name = source, target, name
        self.full_sync_s, self.lifetime, self.clock = full_sync_s, lifetime, clock
        self.position = None
        self.record_sqn: int | None = None  # the SQN of the position's record, as last seen
        self.listener = None
        self.counters = {"applied": 0, "batches": 0, "full_syncs": 0, "repaired": 0,
                         "foreign": [], "errors": 0, "lag_changes": 0, "lag_s": 0.0,
                         "last_error": None}
        self._last_sync = 0.0
        #: The delay of each recent batch: from its oldest change's acknowledgement on the
        #: source to the batch's on the target, in seconds.
        self.delays: deque[float] = deque(maxlen=1024)

    async def resume(self) -> None:
        """Read the position the target holds, and listen to the source after it."""
        labels = self._labels()
        start = 0 if labels is None else dict.fromkeys(labels, 0)
        # The record's SQN first: if another replicator's batch lands between the two reads,
        # this one's next batch is refused (its condition names the older record).
        head = await self.target.head_async(BUCKET, self.name)
        record = await self.target.get_async(BUCKET, self.name)
        self.record_sqn = None if head is None else head.sqn
        self.position = position_of(record, start)
        self.listener = self.source.listen(self.position, name=f"replicate.{self.name}",
                                           lifetime=self.lifetime)
        self._last_sync = time.monotonic()

    async def step(self, timeout: float = POLL_S) -> int:
        """Apply the next changes (waiting up to ``timeout`` for some); how many."""
        changes: list[Change] = await self.listener.poll_async(timeout)
        for start in range(0, len(changes), BATCH):
            await self._apply(changes[start:start + BATCH])
        await self._measure_lag()
        if self.full_sync_s and time.monotonic() - self._last_sync >= self.full_sync_s:
            await self.full_sync()
        return len(changes)

    async def _apply(self, changes: list[Change]) -> None:
        now = self.clock()
        oldest = min(c.last_modified for c in changes)
        position, labels = self.position, self._labels()
        for change in changes:
            position = advance(position, change, labels)
        writes = [write_of(c, self.source_name, now) for c in changes]
        sqns = await self.target.put_many_async(
            writes + [position_write(self.name, position, self.source_name,
                                     changes[-1].last_modified, self.record_sqn)])
        self.position, self.record_sqn = position, sqns[-1]
        self.counters["applied"] += len(changes)
        self.counters["batches"] += 1
        self.delays.append(max(0.0, self.clock() - oldest))
        self.counters["lag_s"] = round(self.delays[-1], 4)

    async def _measure_lag(self) -> None:
        durable = await self._source_sqns()
        # From where the listener has read to: past the position when the last SQNs up to
        # the source's durable one hold no change of its (a split child's first SQN follows
        # its parent's last, which its sibling may hold).
        read = self.position if self.listener is None else self.listener.sqn
        if isinstance(self.position, dict):  # a position from before a split reads on too
            labels = self._labels()
            at = [max(a, b) for a, b in zip(shard_positions(self.position, labels),
                                            shard_positions(read, labels))]
            behind = sum(max(0, d - a) for d, a in zip(durable, at))
        else:
            behind = max(0, durable - max(self.position, read))
        self.counters["lag_changes"] = behind
        if not behind:
            self.counters["lag_s"] = 0.0

    async def _source_sqns(self):
        stats = await self.source.stats_async()
        if "shards" in stats:
            return [part["durable_sqn"] for part in stats["shards"]]
        return stats["durable_sqn"]

    def _labels(self) -> tuple[str, ...] | None:
        """A sharded source's shard labels (``None``: a plain source)."""
        shard_map = getattr(self.source, "shard_map", None)
        return None if shard_map is None else shard_map.labels

    @property
    def source_name(self) -> str:
        return self.source.name or self.source.url

    async def full_sync(self) -> dict:
        """Compare the source, as of the position, and the target, and repair what differs
        (see the module docstring); returns what it found and did."""
        if self.position is None:
            await self.resume()
        # The source as the stream has applied it: a change past the position is the
        # stream's to write, in its order (repaired early, it would be written twice, and a
        # key could go back to an older value before the stream reached the newer one).
        view = await self.source.snapshot_async(at_sqn=self.position)
        try:
            found = await compare_views(view, self.target)
            pairs = [(d.bucket, d.key) for d in found.differences if d.bucket != BUCKET]
            heads = dict(zip(pairs, await self.target.head_many_async(pairs))) if pairs else {}
            marked = {k: h is not None and (h.metadata or {}).get(MARK) == self.source_name
                      for k, h in heads.items()}
            done = {"copy": 0, "delete": 0, "foreign": 0}
            for repair in repairs(found.differences, marked):
                d = repair.difference
                if repair.action == "foreign":
                    self.counters["foreign"].append((d.bucket, d.key))
                else:
                    await self._repair(view, d.bucket, d.key, repair.action,
                                       heads.get((d.bucket, d.key)))
                done[repair.action] += 1
        finally:
            await view.release_async()
        self.counters["full_syncs"] += 1
        self.counters["repaired"] += done["copy"] + done["delete"]
        self._last_sync = time.monotonic()
        return {**done, "differences": len(found), "bytes_exchanged": found.bytes_exchanged}

    async def _repair(self, view, bucket, key, action: str, target_head) -> None:
        removes = [("remove", f, t) for f, t in (target_head.indexes if target_head else ())]
        head = await view.head_async(bucket, key) if action == "copy" else None
        if head is None:
            await self.target.put_many_async([Delete(bucket, key, indexes=removes)])
            return
        value = await view.get_async(bucket, key)
        await self.target.put_many_async([Put(
            bucket, key, value, metadata={**(head.metadata or {}), MARK: self.source_name},
            indexes=removes + [("add", f, t) for f, t in head.indexes],
            expires_at=head.expires_at)])

    def stats(self) -> dict:
        """The counters, the position, and the recent batches' delays (p50, p99)."""
        delays = sorted(self.delays) or [0.0]

        def quantile(q: float) -> float:
            return round(delays[min(len(delays) - 1, int(q * len(delays)))], 4)
        return {"name": self.name, "position": self.position, **self.counters,
                "foreign": list(self.counters["foreign"]), "delay_p50_s": quantile(0.5),
                "delay_p99_s": quantile(0.99)}

    async def run(self, stop) -> None:
        """Steps until ``stop`` (a ``threading.Event``) is set. After an error (counted in
        ``stats()``, with the last one) it resumes from the position the target holds: a
        batch whose write failed, or whose outcome was unknown, is read again from the source
        if, and only if, it did not land."""
        while not stop.is_set():
            try:
                if self.listener is None:
                    await self.resume()
                await self.step()
            except Exception as exc:  # noqa: BLE001 - counted and shown; the loop goes on
                self.counters["errors"] += 1
                self.counters["last_error"] = f"{type(exc).__name__}: {exc}"
                await self.close()
                self.listener = None
                await asyncio.sleep(POLL_S)

    async def close(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(LeveledError):
                await self.listener.close_async()


def check_name(name) -> str:
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidArgumentError(f"a replication name must be a non-empty str without '/', "
                                   f"not {name!r}")
    return name
