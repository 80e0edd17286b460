"""Read-write transactions: ``snapshot`` and ``serializable`` isolation, on a plain store or
across the shards of a sharded one.

A :class:`Transaction` keeps its writes in the client until it commits. Each key it reads has
a *version*: its SQN, or absent.

* ``serializable`` reads the store as it is: each read is one call to each shard involved,
  which answers the keys' values and versions as of one moment (``Bookie.read_versions``).
  On a plain store, a key that a commit of this process writes, that commit still in flight,
  is read from that write instead (:mod:`.in_flight_writes`): its version is that write,
  which the commit names, and which must land for the commit to.
* ``snapshot`` reads one snapshot of the store (a consistent cut on a sharded store), taken at
  its first read.

At commit every write of a key it read carries that version as a condition; under
``serializable`` every key read and not written travels as a check (``OP_CHECK``: checked
with the writes' conditions, written to no file), and every range it folded or queried as a
range check (``OP_RANGE``). The store applies the writes only if all of them hold, in one
step:

* on one shard, that is one round trip and one journal write (on a plain store shared with
  the process's concurrent commits: :mod:`.store_transactions`);
* across shards, the cross-shard protocol (:mod:`leveled_ray.cluster.txn`): each shard locks
  the keys and ranges and checks them when it prepares its part, so none can change before
  the commit record decides.

Under ``serializable`` the commit is the moment the transaction takes effect: its reads are
still current then and its writes go in at once, so the committed transactions are
equivalent to running one at a time in commit order. A transaction that only read commits
with no call when it read at one moment; else it reads its keys and ranges again, and each
unchanged since its first read means all held at the moment the second reads began. Under
``snapshot`` only the written keys are checked (and those written unread, against the
snapshot): the first committer of a key wins, and write skew is allowed. A key absent when
read and absent again at commit (written and deleted meanwhile) counts as unchanged.

A conflict raises :class:`~leveled_ray.errors.ConflictError` with nothing written;
:meth:`Transactions.run_transaction` runs a function again on a new transaction until it
commits. A commit whose answer was lost (:class:`~leveled_ray.errors.StoreUnavailableError`)
may or may not have taken effect: it is not run again.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..codec import (
    IF_ABSENT,
    Delete,
    Head,
    Put,
    check_change,
    check_put_size,
    checked_key,
    make_change,
    written,
)
from ..codec.conditions import UNKNOWN_WRITE
from ..codec.entries import live_entries
from ..codec.index_terms import change_entry
from ..codec.keys import split_object_key
from ..errors import (
    ConditionFailedError,
    ConflictError,
    InvalidArgumentError,
    TransactionExpiredError,
)
from ..files.sync import with_sync_twins
from ..options import check_number
from .in_flight_writes import InFlightRead, InFlightWrites
from .transaction_ranges import SERIALIZABLE, SNAPSHOT, RangeReads

ISOLATIONS = (SNAPSHOT, SERIALIZABLE)


@with_sync_twins
class Transaction(RangeReads):
    """One transaction on ``store`` (see the module's docstring). Made by
    ``store.transaction()``; a context manager (sync and async) that commits on leaving the
    block and rolls back on an exception. Used by one thread (or task) at a time.

    Example::

        with store.transaction() as t:
            a = int(t.get("acct", "alice"))
            b = int(t.get("acct", "bob"))
            t.put("acct", "alice", b"%d" % (a - 10))
            t.put("acct", "bob", b"%d" % (b + 10))
    """

    def __init__(self, store, isolation: str = SERIALIZABLE, lifetime_s: float | None = None):
        if isolation not in ISOLATIONS:
            raise InvalidArgumentError(f"isolation must be one of {ISOLATIONS}, "
                                       f"not {isolation!r}")
        if store.head_only:
            raise InvalidArgumentError("a head_only store has no transactions")
        self.store = store
        self.isolation = isolation
        self.lifetime_s = float(check_number(
            "lifetime_s", store.options.transaction_lifetime_s if lifetime_s is None
            else lifetime_s, minimum=0, inclusive=False))
        self.deadline = time.monotonic() + self.lifetime_s
        self.state = "open"  # then "committed" or "rolled back"
        self._snapshot: Any = None
        #: Key -> its head as read (its version), or its read of a write in flight.
        self._reads: dict[bytes, Head | InFlightRead | None] = {}
        self._values: dict[bytes, bytes | None] = {}  # key -> its value as read
        self._writes: dict[bytes, tuple] = {}  # key -> (change, value), the last one
        #: Key ranges read (serializable), each as ``((lo, hi, [(key, SQN)], kind, each
        #: key's object), how to read it again)``: see :func:`~leveled_ray.codec.range_check`.
        self._ranges: list[tuple] = []
        #: How many moments its reads (serializable) come from: a transaction that read at
        #: one moment only, and wrote nothing, commits with no call.
        self._moments = 0
        self._one_shard = getattr(store, "shards", 1) == 1
        #: The writes in flight of its process's commits, which it reads (``serializable`` on
        #: a plain store: :mod:`.in_flight_writes`).
        self._flight: InFlightWrites | None = (
            getattr(store, "_in_flight_writes", None) if isolation == SERIALIZABLE else None)
        self._user = threading.Lock()
        #: Whether its writes were sent: until then a failure leaves nothing written.
        self.commit_sent = False

    def __repr__(self) -> str:
        return (f"Transaction({self.isolation}, {self.state}, reads={len(self._reads)}, "
                f"writes={len(self._writes)})")

    # -- one user at a time, within its lifetime --

    def _enter(self) -> None:
        if not self._user.acquire(blocking=False):
            raise InvalidArgumentError("a transaction is used by one thread or task at a time")
        if self.state != "open":
            self._user.release()
            raise InvalidArgumentError(f"the transaction is {self.state}")

    async def _expired(self) -> None:
        if time.monotonic() > self.deadline:
            await self._end("rolled back")
            raise TransactionExpiredError(
                f"the transaction outlived its lifetime ({self.lifetime_s:g}s); nothing "
                "was written")

    async def _view(self):
        """The snapshot that a ``snapshot`` transaction reads, taken at its first read."""
        if self._snapshot is None:
            self._snapshot = await self.store.snapshot_async(
                values=True, timeout_s=self.lifetime_s)
        return self._snapshot

    # -- reads, with the transaction's own writes over them --

    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """The heads of many ``(bucket, key)`` pairs as the transaction sees them. A key it
        wrote has SQN 0 until it commits. Cost: for the keys it did not read or write, one
        round trip to each shard involved (``serializable``), or a read of its snapshot."""
        self._enter()
        try:
            lkeys = self._lkeys(pairs)
            await self._read(lkeys, values=False)
            await self._settle_in_flight(lkeys)
            return [self._own_head(self._writes[k][0]) if k in self._writes else self._reads[k]
                    for k in lkeys]
        finally:
            self._user.release()

    async def head_async(self, bucket, key) -> Head | None:
        """The head of ``(bucket, key)``, as :meth:`head_many_async`."""
        return (await self.head_many_async([(bucket, key)]))[0]

    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """The values of many ``(bucket, key)`` pairs as the transaction sees them (its own
        writes included), ``None`` where absent. Cost: :meth:`head_many_async`'s, with the
        values."""
        self._enter()
        try:
            lkeys = self._lkeys(pairs)
            await self._read(lkeys, values=True)
            return [self._writes[k][1] if k in self._writes else self._values[k]
                    for k in lkeys]
        finally:
            self._user.release()

    async def get_async(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)``, as :meth:`get_many_async`."""
        return (await self.get_many_async([(bucket, key)]))[0]

    def _lkeys(self, pairs: Iterable[Sequence]) -> list[bytes]:
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
            raise InvalidArgumentError("expected a list of (bucket, key) pairs")
        return [checked_key(*self._pair(p), self.store.options) for p in pairs]

    @staticmethod
    def _pair(pair) -> tuple:
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise InvalidArgumentError(f"expected a (bucket, key) pair, not {pair!r}")
        return tuple(pair)

    async def _read(self, lkeys: list[bytes], values: bool) -> None:
        """Read the keys it has not read yet (or not their values, if ``values``): each read
        key's head (its version) goes into ``_reads``, its value into ``_values``. Under
        ``serializable`` on a plain store, the values of keys that this process's commits
        in flight write are read from the newest of them (:mod:`.in_flight_writes`), as are
        those that such a commit sent during the read writes. A key read again at another
        version is a conflict at once: the commit would refuse it."""
        await self._expired()
        wanted = list(dict.fromkeys(
            k for k in lkeys if k not in self._writes
            and (k not in self._reads or values and k not in self._values)))
        if not wanted:
            return
        in_flight = self._in_flight(wanted) if values else {}
        rest = [k for k in wanted if k not in in_flight]
        heads, found = await self._fetch(rest, values) if rest else ([], None)
        read = {k: (h, None if found is None else found[i])
                for i, (k, h) in enumerate(zip(rest, heads))}
        if values and self._flight is not None:  # what changed while it read:
            newest = self._in_flight(wanted)  # writes sent meanwhile are newer
            failed = [k for k, (r, _) in in_flight.items()  # read in flight, then failed
                      if k not in newest and not self._flight.landed(r.token)]
            missed = [k for k in self._flight.missed(rest, [_version(h) for h in heads])
                      if k not in newest]  # a write of its process landed meanwhile
            for lkey in failed:
                del in_flight[lkey]
            in_flight.update(newest)
            if again := failed + missed:
                heads_again, found_again = await self._fetch(again, values)
                read.update(zip(again, zip(heads_again, found_again)))
        read.update(in_flight)
        if in_flight:
            self._moments = 2  # a read-only commit checks that those writes landed
            self._flight.note_reads(len(in_flight))
        for lkey, (head, value) in read.items():
            if lkey in self._reads and _version(self._reads[lkey]) != _version(head):
                await self._end("rolled back")
                raise ConflictError("not committed: a key it read changed while it ran")
            self._reads[lkey] = head
            if values:
                self._values[lkey] = value

    def _in_flight(self, lkeys: list[bytes]) -> dict[bytes, tuple[InFlightRead, bytes]]:
        """The keys of ``lkeys`` that its process's commits in flight write, each read from
        the newest (none if it reads no writes in flight)."""
        return {} if self._flight is None else self._flight.reads(lkeys)

    async def _settle_in_flight(self, lkeys: Iterable[bytes]) -> None:
        """Each of ``lkeys`` read from a write in flight: once that write's commit answered,
        read its head; a conflict unless it is that write's (then it is the key's version)."""
        reads = {k: r for k in lkeys if isinstance(r := self._reads.get(k), InFlightRead)}
        if not reads:
            return
        assert self._flight is not None  # it read writes in flight
        sqns = [await self._flight.sqn_of(r) for r in reads.values()]
        heads, _ = await self.store._read_versions_async(list(reads), False)
        if any(sqn is None or _version(head) != sqn for sqn, head in zip(sqns, heads)):
            await self._end("rolled back")
            raise ConflictError("not committed: a write it read in flight did not land, or "
                                "was overwritten")
        self._reads.update(zip(reads, heads))

    async def _fetch(self, lkeys: list[bytes], values: bool) -> tuple[list, list | None]:
        """Heads (and values) of ``lkeys``: from the snapshot, or as they are now."""
        if self.isolation == SNAPSHOT:
            view = await self._view()
            return await view._versions_async([split_object_key(k) for k in lkeys], values)
        self._moments += 1 if self._one_shard else 2  # shards answer at moments of their own
        return await self.store._read_versions_async(lkeys, values)

    def _own_head(self, change) -> Head | None:
        entry = change_entry(change, 0, int(self.store.clock() * 1000))
        (live,) = live_entries([entry], self.store.clock())
        return None if live is None else Head(sqn=0, size=change.size,
                                              last_modified=entry[5] / 1000.0, hash=change.vhash,
                                              expires_at=float(change.expiry) or None)

    # -- writes: kept here until the commit --

    def put(self, bucket, key, value: bytes, *, indexes=(), ttl: float | None = None,
            metadata: dict | None = None) -> None:
        """Write ``value`` at commit (no I/O now); the transaction reads it back meanwhile."""
        self.put_many([Put(bucket, key, value, indexes, ttl, metadata)])

    def delete(self, bucket, key, *, indexes=()) -> None:
        """Delete the object at commit (no I/O now)."""
        self.put_many([Delete(bucket, key, indexes)])

    def put_many(self, items: Iterable[Put | Delete]) -> None:
        """Write many changes at commit (no I/O now). Their own ``if_sqn`` and ``if_absent``
        are refused: every key the transaction writes is checked already."""
        self._enter()
        try:
            if isinstance(items, (Put, Delete)) or not isinstance(items, Iterable):
                raise InvalidArgumentError("put_many takes a list of lr.Put / lr.Delete")
            items = list(items)
            if any(getattr(i, "if_sqn", None) is not None or getattr(i, "if_absent", False)
                   for i in items):
                raise InvalidArgumentError("a transaction checks every key it writes: give "
                                           "no if_sqn or if_absent")
            now_s = self.store.clock()
            pairs = [make_change(item, self.store.options, now_s) for item in items]
            for change, value in pairs:
                self._writes.pop(change.lkey, None)  # the last write of a key goes last
                self._writes[change.lkey] = (change, value)
        finally:
            self._user.release()

    # -- the end --

    async def commit_async(self) -> None:
        """Write every change at once if nothing the transaction depends on changed since it
        read it; else raise :class:`~leveled_ray.errors.ConflictError`, with nothing written.
        Cost: none for a transaction that only read, at one moment (one shard, one call);
        one more read of its keys and ranges for one that only read at several; one round
        trip (a ``put_many``) when its keys are on one shard; across shards, the cross-shard
        ``put_many``'s (a prepare on each, a commit record, an apply on each)."""
        self._enter()
        try:
            await self._expired()
            if self._writes:
                await self._write()
            elif self.isolation == SERIALIZABLE and self._moments > 1:
                await self._settle_in_flight(list(self._reads))
                await self._validate()
            await self._end("committed")
        finally:
            self._user.release()

    async def rollback_async(self) -> None:
        """End the transaction with nothing written (a rolled-back or committed one: no-op)."""
        if self.state == "open":
            await self._end("rolled back")

    async def _write(self) -> None:
        blind = [k for k in self._writes if k not in self._reads]
        if blind and self.isolation == SNAPSHOT:  # their versions in the snapshot
            heads, _ = await self._fetch(blind, values=False)
            self._reads.update(zip(blind, heads))
        changes, values = [], []
        in_flight: dict[int, InFlightRead] = {}  # index -> its key's read of a write in flight
        for lkey, (change, value) in self._writes.items():
            if lkey in self._reads:  # serializable: a key written unread depends on nothing
                change = change._replace(condition=self._condition(
                    self._reads[lkey], len(changes), in_flight))
            changes.append(change)
            values.append(value)
        if self.isolation == SERIALIZABLE:
            changes += [check_change(k, self._condition(h, len(changes) + i, in_flight))
                        for i, (k, h) in enumerate(
                            (k, h) for k, h in self._reads.items() if k not in self._writes)]
        check_put_size(written(changes), self.store.options)
        self.commit_sent = True
        try:
            await self.store._commit_changes_async(changes, values,
                                                   [r for r, _ in self._ranges],
                                                   *((in_flight,) if in_flight else ()))
        except ConditionFailedError as exc:
            await self._end("rolled back")
            raise ConflictError(f"not committed: {len(exc.failures)} key(s) changed since the "
                                f"transaction read them: {list(exc.failures)[:5]}") from None
        except ConflictError:
            await self._end("rolled back")
            raise

    @staticmethod
    def _condition(read: Head | InFlightRead | None, index: int,
                   in_flight: dict[int, InFlightRead]) -> int:
        """The condition of a key read as ``read``, by the commit's change ``index``: absent,
        its SQN, or (noted in ``in_flight``) the SQN of the write in flight it read."""
        if isinstance(read, InFlightRead):
            in_flight[index] = read
            return UNKNOWN_WRITE
        return IF_ABSENT if read is None else read.sqn

    async def _validate(self) -> None:
        """A read-only transaction that read at several moments: its keys and ranges, read
        again, are as it read them. Each was then unchanged from its first read to this one,
        which began after the last first read: so at that moment they all held, and the
        transaction takes effect there."""
        lkeys = list(self._reads)
        heads, _ = await self.store._read_versions_async(lkeys, False) if lkeys else ([], None)
        changed = [k for k, h in zip(lkeys, heads) if _version(h) != _version(self._reads[k])]
        for (lo, _, found, _, _), again in self._ranges:
            if await again() != found:
                changed.append(lo)
        if changed:
            await self._end("rolled back")
            raise ConflictError(f"not committed: {len(changed)} key(s) or range(s) changed "
                                "while it read")

    async def _end(self, state: str) -> None:
        self.state = state
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:  # no one reads it any more: its answer is not awaited
            snapshot._release_soon()

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, kind, exc, tb) -> None:
        if kind is None and self.state == "open":
            await self.commit_async()
        else:
            await self.rollback_async()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None and self.state == "open":
            self.commit()
        else:
            self.rollback()

    # For type checkers: with_sync_twins makes each from its *_async form.
    @abc.abstractmethod
    def get(self, bucket, key) -> bytes | None: ...

    @abc.abstractmethod
    def get_many(self, pairs: Iterable[Sequence]) -> list[bytes | None]: ...

    @abc.abstractmethod
    def head(self, bucket, key) -> Head | None: ...

    @abc.abstractmethod
    def head_many(self, pairs: Iterable[Sequence]) -> list[Head | None]: ...

    @abc.abstractmethod
    def commit(self) -> None: ...

    @abc.abstractmethod
    def rollback(self) -> None: ...


def _version(head: Head | InFlightRead | None) -> int | InFlightRead | None:
    """A key's version: its SQN, ``None`` when absent, or the write in flight it read."""
    return head if head is None or isinstance(head, InFlightRead) else head.sqn
