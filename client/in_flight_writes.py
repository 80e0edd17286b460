"""This process's transaction commits on a plain store that are still in flight, by key.

A transaction that reads a key which one of them writes reads that write (its value, named by
the commit's *token*) rather than the version before it, with which its commit would conflict
for certain once that write lands. It cannot know the SQN the write will get: its commit
names the write by token instead (:class:`~leveled_ray.codec.conditions.Depends`), and the
Bookie checks the key against the SQN that write got. A write that failed, or that the Bookie
forgot (another Bookie since, or too long ago), makes the reader's commit a conflict: a read
of a write in flight is never taken for a write that did not happen.

So the transactions of one process that write a hot key take it in turn within one shared
commit call, where each would otherwise have read the version before the others' writes.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future
from typing import NamedTuple

from ..codec import OP_PUT, Change, written


class InFlightRead(NamedTuple):
    """A transaction's read of a key that a commit of its process, still in flight, writes:
    that commit's ``token`` and its change of the key."""

    token: int
    change: Change


class InFlightWrites:
    """The writes in flight of this process's transaction commits through one handle, by key,
    oldest first; what each commit read in flight; and the outcome of each recent commit (its
    first SQN), by token.

    A commit that fails dooms every commit that read its writes in flight, and theirs in turn:
    their writes are no longer read (a transaction reads the key's write before them, or the
    store), and a commit that would depend on one is refused before it is sent."""

    def __init__(self, keep: int = 4096):
        self._lock = threading.Lock()
        #: Key -> its writes in flight, oldest first: (token, change, value); change ``None``
        #: for a write that is not read this way (a delete, or one with a lifetime).
        self._by_key: dict[bytes, list[tuple[int, Change | None, bytes | None]]] = {}
        self._keys: dict[int, list[bytes]] = {}  # token -> the keys it writes, in flight
        self._readers: dict[int, list[int]] = {}  # token -> the commits that read it
        #: Token -> [each written key's offset from the first SQN, whether the commit
        #: answered, its first SQN if it was written].
        self._outcomes: OrderedDict[int, list] = OrderedDict()
        #: Token -> the futures of those who wait for its commit's answer (:meth:`sqn_of`).
        self._waiting: dict[int, list[Future]] = {}
        #: Key -> the SQN of its newest write that landed, for the newest ``keep`` keys.
        self._landed: OrderedDict[bytes, int] = OrderedDict()
        self._keep = keep
        #: Keys read from writes in flight; commits refused before they were sent.
        self.counters = {"read": 0, "refused": 0}

    def begin(self, changes: list[Change], values: list, reads: Iterable[int]) -> int | None:
        """A commit of ``changes`` (its writes with their ``values``, then its checks) that
        read the writes of commits ``reads`` in flight is about to be sent: its token, or
        ``None`` if one of those failed already (so would it)."""
        token = random.getrandbits(63)
        writes = written(changes)
        with self._lock:
            reads = set(reads)
            if any(self._answer(t) == (True, None) for t in reads):  # failed
                self.counters["refused"] += 1
                return None
            for read in reads:
                self._readers.setdefault(read, []).append(token)
            self._keys[token] = [c.lkey for c in writes]
            for change, value in zip(writes, values):
                readable = change.op == OP_PUT and not change.expiry
                self._by_key.setdefault(change.lkey, []).append(
                    (token, change if readable else None, value))
            self._outcomes[token] = [{c.lkey: i for i, c in enumerate(writes)}, False, None]
            while len(self._outcomes) > self._keep:
                self._outcomes.popitem(last=False)
        return token

    def _answer(self, token: int) -> tuple[bool, int | None]:
        """Whether a commit answered, and its first SQN if it was written (under the lock)."""
        _, answered, first_sqn = self._outcomes.get(token, (None, False, None))
        return answered, first_sqn

    def end(self, token: int, first_sqn: int | None) -> None:
        """A commit's outcome: its first SQN, or ``None`` if it was not written (or may not
        have been), which dooms the commits that read its writes."""
        ended = [token]
        with self._lock:
            outcome = self._outcomes.get(token)
            offsets = {} if outcome is None else outcome[0]
            if outcome is not None:
                outcome[1:] = [True, first_sqn]
            waiting = self._waiting.pop(token, ())
            if first_sqn is not None:
                for lkey, offset in offsets.items():
                    self._landed[lkey] = max(self._landed.pop(lkey, 0), first_sqn + offset)
                while len(self._landed) > self._keep:
                    self._landed.popitem(last=False)
            while ended:
                done = ended.pop()
                for lkey in self._keys.pop(done, ()):
                    writes = [w for w in self._by_key.get(lkey, ()) if w[0] != done]
                    if writes:
                        self._by_key[lkey] = writes
                    else:
                        self._by_key.pop(lkey, None)
                readers = self._readers.pop(done, ())
                if first_sqn is None:
                    ended += readers  # doomed: no longer read
        for future in waiting:
            future.set_result(first_sqn)

    def reads(self, lkeys: list[bytes]) -> dict[bytes, tuple[InFlightRead, bytes]]:
        """The keys of ``lkeys`` whose newest write is in flight, each as read from it."""
        found = {}
        with self._lock:
            for lkey in lkeys:
                writes = self._by_key.get(lkey)
                if writes and writes[-1][1] is not None:
                    token, change, value = writes[-1]
                    found[lkey] = (InFlightRead(token, change), value)
        return found

    def note_reads(self, count: int) -> None:
        """``count`` keys were read from writes in flight."""
        with self._lock:
            self.counters["read"] += count

    def landed(self, token: int) -> bool:
        """Whether a commit answered that it was written."""
        with self._lock:
            return self._answer(token)[1] is not None

    def missed(self, lkeys: list[bytes], sqns: list[int | None]) -> list[bytes]:
        """The keys of ``lkeys``, read at ``sqns`` (``None``: absent), whose read missed a
        write of this process that landed (its commit answered as the read was served)."""
        with self._lock:
            landed = self._landed
            return [k for k, sqn in zip(lkeys, sqns) if landed.get(k, 0) > (sqn or 0)]

    async def sqn_of(self, read: InFlightRead) -> int | None:
        """The SQN that the write read got, once its commit answered (``None``: not written,
        not known, or forgotten)."""
        with self._lock:
            outcome = self._outcomes.get(read.token)
            if outcome is None:
                return None
            offsets, answered, first = outcome
            if not answered:
                waiter: Future = Future()
                self._waiting.setdefault(read.token, []).append(waiter)
        if not answered:
            first = await asyncio.wrap_future(waiter)
        return None if first is None else first + offsets[read.change.lkey]
