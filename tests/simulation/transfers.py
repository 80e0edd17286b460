"""The simulation's transactions: transfers between accounts, audits that read them all, and
shift changes of two doctors on call (write skew's textbook case).

Each transfer is a transaction of the product (``store.transaction``) that reads two accounts
and writes both, moving an amount from one to the other; its values name it (``b"<id>:<balance>"``),
so every read names the transaction whose version it saw. An audit reads every account in one
transaction. Every transaction goes into a history (what it read, what it wrote, how it
ended as its client saw it) that :func:`~leveled_ray.testing.sim.serializable.anomalies`
checks at the end, with the total of the balances, and the change feed: a committed transfer
is in it once and whole, a refused one never.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from model import Model, definite

from leveled_ray.client.in_flight_writes import InFlightRead
from leveled_ray.codec.keys import object_key
from leveled_ray.errors import ConflictError, LeveledError
from leveled_ray.testing.sim.serializable import (
    ABORTED,
    COMMITTED,
    INITIAL,
    UNKNOWN,
    Txn,
    anomalies,
    committed_of,
)

ACCOUNTS = [("acct", f"a{j}") for j in range(5)]
#: An account no transfer wrote yet holds this much (it is absent from the store).
OPENING = 100
#: Two doctors on call (1) or not (0): a shift change reads both and writes one, so two at
#: once skew their writes unless the isolation is serializable.
DOCTORS = [("oncall", "d0"), ("oncall", "d1")]
#: Transactions a client runs at once.
AT_ONCE = 3


def parse(value: bytes | None, on_call: int = OPENING) -> tuple[str, int]:
    """The transaction that wrote a value, and the number it holds (``on_call`` if none
    wrote it yet)."""
    if value is None:
        return INITIAL, on_call
    writer, balance = value.decode().rsplit(":", 1)
    return writer, int(balance)


class Transfers:
    """The transfers and audits of one run, and their checks."""

    def __init__(self, model: Model, rng, isolation: str, staggered: bool = False):
        self.model, self.rng, self.isolation = model, rng, isolation
        #: Each transaction of a round begins as the one before it commits: so it reads the
        #: writes of the commits before it in flight (``client/in_flight_writes.py``).
        self.staggered = staggered
        self.history: list[Txn] = []

    async def client(self, store, i: int, count: int, pause) -> None:
        """``count`` transactions of client ``i``, mostly transfers, some shift changes and
        audits, in rounds of :data:`AT_ONCE` on its handle with the same thinking time: as a
        process's concurrent transactions, their reads and commits share calls
        (``client/coalesce.py``; counted as ``transaction calls shared``)."""
        try:
            for first in range(0, count, AT_ONCE):
                delay = self.rng.random() * 0.5
                names = [f"{i}.{k}" for k in range(first, min(first + AT_ONCE, count))]
                committing = [asyncio.Event() for _ in names]

                async def one(n: int) -> None:
                    async def think(_most_s: float) -> None:
                        # Staggered, the others think or not: so they commit as the writes
                        # they read are in flight, or once those answered.
                        if not (self.staggered and n and self.rng.random() < 0.5):
                            await asyncio.sleep(delay)
                        committing[n].set()  # it commits now: the next one begins
                    if self.staggered and n:
                        await committing[n - 1].wait()
                    try:
                        await self.one(store, names[n], think)
                    finally:
                        committing[n].set()
                await asyncio.gather(*(one(n) for n in range(len(names))))
                await pause(0.5)
        finally:
            for shard in getattr(store, "_stores", [store]):
                for counters in (shard._writes.counters, shard._reads.counters):
                    self.model.checks["transaction calls shared"] += (counters["parts"]
                                                                      - counters["calls"])
                in_flight = shard._in_flight_writes.counters
                self.model.checks["reads of writes in flight"] += in_flight["read"]
                self.model.checks["commits refused, a write read in flight failed"] += (
                    in_flight["refused"])

    async def one(self, store, name: str, think) -> None:
        kind = self.rng.random()
        if kind < 0.25:
            await self.audit(store, f"audit{name}")
        elif kind < 0.5:
            await self.shift(store, f"shift{name}", think)
        else:
            await self.transfer(store, f"x{name}", think)

    async def shift(self, store, tid: str, think) -> None:
        """Read both doctors; if both are on call one goes off, else the one off comes on."""
        record = Txn(tid)
        self.history.append(record)
        t = store.transaction(self.isolation)
        try:
            seen = [parse(v, on_call=1) for v in await t.get_many_async(DOCTORS)]
            record.reads = {d: writer for d, (writer, _) in zip(DOCTORS, seen)}
            record.in_flight = read_in_flight(t, DOCTORS)
            if all(on for _, on in seen):
                changed = self.rng.choice(DOCTORS)
                t.put(*changed, f"{tid}:0".encode())
            else:
                changed = DOCTORS[[on for _, on in seen].index(0)]
                t.put(*changed, f"{tid}:1".encode())
        except LeveledError:
            record.outcome = ABORTED
            await t.rollback_async()
            return
        record.writes = (changed,)
        await think(0.5)  # the app's own work: others commit meanwhile
        await self._commit(t, record)
        if record.outcome == COMMITTED:
            self.model.checks["shift changes committed"] += 1

    async def transfer(self, store, tid: str, think) -> None:
        record = Txn(tid)
        self.history.append(record)
        (a, b), amount = self.rng.sample(ACCOUNTS, 2), self.rng.randint(1, 20)
        t = store.transaction(self.isolation)
        try:
            seen = [parse(v) for v in await t.get_many_async([a, b])]
            record.reads = {a: seen[0][0], b: seen[1][0]}
            record.in_flight = read_in_flight(t, [a, b])
            t.put(*a, f"{tid}:{seen[0][1] - amount}".encode())
            t.put(*b, f"{tid}:{seen[1][1] + amount}".encode())
        except LeveledError:
            record.outcome = ABORTED  # nothing was sent to be written
            await t.rollback_async()
            return
        record.writes = (a, b)
        await think(0.5)
        await self._commit(t, record)

    async def _commit(self, t, record: Txn) -> None:
        try:
            await t.commit_async()
            record.outcome = COMMITTED
            self.model.checks["transactions committed"] += 1
        except ConflictError:
            record.outcome = ABORTED
            self.model.checks["transactions refused"] += 1
        except LeveledError as exc:
            record.outcome = ABORTED if definite(exc) else UNKNOWN

    async def audit(self, store, tid: str) -> None:
        """Every account in one read-only transaction: the balances add up."""
        record = Txn(tid)
        t = store.transaction(self.isolation)
        try:
            seen = [parse(v) for v in await t.get_many_async(ACCOUNTS)]
            in_flight = read_in_flight(t, ACCOUNTS)
            await t.commit_async()
        except LeveledError:
            await t.rollback_async()
            return
        record.reads = {key: writer for key, (writer, _) in zip(ACCOUNTS, seen)}
        record.in_flight = in_flight
        record.outcome = COMMITTED
        self.history.append(record)
        self.check_total([balance for _, balance in seen], tid)

    def check_total(self, balances: list[int], where: str) -> None:
        self.model.checks["audits"] += 1
        if sum(balances) != OPENING * len(ACCOUNTS):
            self.model.violated("transfers keep the total",
                                f"{where}: {balances} add up to {sum(balances)}")

    async def check(self, store, changes: list) -> None:
        """At the end: a last audit, the history, and the feed (``changes(0)``)."""
        if not self.history:
            return
        await self.audit(store, "final")
        if self.history[-1].id != "final":
            self.model.violated("transfers keep the total", "the final audit failed")
        for found in anomalies(self.history, self.isolation):
            self.model.violated(f"transactions are {self.isolation}", found)
        self.model.checks["histories"] += 1
        in_feed = Counter((c.bucket, c.key, c.value) for c in changes)
        committed = committed_of(self.history, aborted_readers=True)
        for t in self.history:
            if not t.writes:
                continue
            count = sum(in_feed[(b, k, _value_of(changes, t.id, (b, k)))] for b, k in t.writes)
            if t.id in committed and count != len(t.writes) or t.outcome == ABORTED and count:
                self.model.violated("a transaction is in the feed once and whole if committed",
                                    f"{t.id} ({t.outcome}): {count} of {len(t.writes)} "
                                    "changes in the feed")


def read_in_flight(t, keys: list[tuple]) -> frozenset:
    """The keys of ``keys`` that ``t`` read from a write in flight (the product's record of
    its reads: ``Transaction._reads``)."""
    return frozenset(k for k in keys if isinstance(t._reads.get(object_key(*k)), InFlightRead))


def _value_of(changes: list, tid: str, key: tuple) -> bytes | None:
    prefix = f"{tid}:".encode()
    for c in changes:
        if (c.bucket, c.key) == key and c.value is not None and c.value.startswith(prefix):
            return c.value
    return None
