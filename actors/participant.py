"""A shard's side of a cross-shard ``put_many``: prepare, then commit or abort.

1. **Prepare** (:meth:`Participant.prepare`): the part's keys are locked (another batch holding
   one of them answers ``busy``: the client retries), its conditions are checked against every
   change before it, and the part is written to the shard's store as ``txn/<id>.part``. Until
   the batch is decided, other writes of those keys wait, and so do reads: no reader can see a
   later state of one shard and an earlier state of another.
2. **Decide**: the client creates the commit record once every shard prepared (see
   :mod:`leveled_ray.manifest.txn_records`).
3. **Commit** applies the part as one ordinary durable group (its conditions were checked
   under the lock), unlocks, then deletes the part object. **Abort** unlocks and deletes it.

A bulk write across shards (the Spark writer, :mod:`leveled_ray.bulk.sharded`) prepares parts
too: each names the files it wrote to the shard's store, and its commit installs them
(:meth:`Participant.prepare_ingest`). It locks no key.

A transaction's part may hold checks too (``OP_CHECK``, ``OP_RANGE``: see
:mod:`leveled_ray.client.transaction`): they are locked and checked with the rest, and
written nowhere; a range is locked whole, so no write goes into it until the part is decided.

A clean close decides and settles every ``put_many`` part held first
(:meth:`Participant.settle_all`: an undecided batch is aborted), so a shard closed cleanly
holds none, and a split, which needs a shard without parts, follows a close at once (a bulk
write's part waits for its own commit).

A part no one decides within ``txn_timeout_s`` (its client died) is decided here: ``abort``
unless the record says ``commit`` already. A shard that restarts finds its parts in its store
and settles each from the record the same way (:meth:`Participant.recover`), before it takes any
write. A part's keys stay locked from its prepare until it is applied, so an entry of one of
them at or above the SQN the shard had reached when it prepared the part was written by the
part or after it: a part found at a restart after it was applied (its delete failed, or the
shard died first) is not applied again
(:func:`~leveled_ray.manifest.txn_records.applied_already`). A bulk write's part installed
already is recognised by its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable

from ..clock import Clock
from ..codec import NO_CONDITION, OP_RANGE, Change, keyed, written
from ..errors import LeveledError, StoreClosedError
from ..files.store import NotFound, ObjectStore
from ..manifest.batch_tags import batch_tag
from ..manifest.ingest import check_install_order
from ..manifest.txn_records import (
    ABORT,
    COMMIT,
    Part,
    applied_already,
    decide,
    decode_part,
    encode_part,
    installed_already,
    part_name,
    read_numbers,
    settle_before,
    txn_of_part,
)
from ..options import Options
from .in_flight import InFlight
from .remote import ValueBatch
from .tasks import Tasks
from .write_path import WritePath

#: How long the keys of an applied cross-shard part are noted (see Participant.notes): far
#: longer than a batched read takes.
NOTED_S = 60.0
BUSY = "busy"
#: Installs a bulk write's files (journal, SSTs) as the part of batch ``txn``.
Install = Callable[[tuple, tuple, str], Awaitable]


class Prepared:
    """A part waiting for its decision."""

    def __init__(self, part: Part):
        self.part = part
        self.settled: asyncio.Future | None = None  # the commit or abort under way
        self.applied = False  # settled: only its part object is left to delete
        self.expiry: asyncio.Task | None = None
        self.number: tuple[int, int] = (0, 0)  # (writer epoch, count) of this shard's parts
        self.numbers: dict | None = None  # every shard's part number (from commit)
        self.found = False  # found in the store (after a restart), not prepared here
        self.attempted = False  # an apply was sent: a retry first checks whether it landed

    @property
    def lkeys(self) -> list[bytes]:
        return [c.lkey for c in keyed(list(self.part.changes))]


class Participant:
    """The prepared parts of one shard, hosted by its Bookie."""

    def __init__(self, store: ObjectStore, options: Options, writes: WritePath, clock: Clock,
                 epoch: int = 0, install: Install | None = None):
        self.store, self.options, self.writes, self.clock = store, options, writes, clock
        self.install = install
        self.epoch = epoch  # the writer's: part numbers grow across restarts too
        self.parts: dict[str, Prepared] = {}
        self.prepared = 0  # parts prepared by this writer so far
        self.noted: dict[bytes, dict] = {}
        self._noted_order: deque = deque()
        self.applied_sqns: dict[str, list[int]] = {}  # recently applied parts' SQNs
        self._applied_order: deque = deque()
        self.tasks = Tasks("Participant")
        self._roots: dict[str, ObjectStore] = {}
        self.counters = {"txn_prepared": 0, "txn_committed": 0, "txn_aborted": 0,
                         "txn_busy": 0, "txn_decided_here": 0, "txn_recovered": 0,
                         "txn_swept": 0, "txn_applied_before": 0, "txn_delete_retries": 0,
                         "txn_refused_stopped": 0, "txn_record_gone": 0}
        #: The first SQN of the highest bulk write whose install began (see settle_lower).
        self.installing = 0
        self._prepares = InFlight()
        self.closing = False  # settling before a close: no part is prepared any more
        self._releases: set[asyncio.Task] = set()

    def _root(self, url: str) -> ObjectStore:
        if url not in self._roots:
            self._roots[url] = ObjectStore.from_url(url, self.options)
        return self._roots[url]

    @contextlib.asynccontextmanager
    async def _preparing_part(self):
        """A part is prepared only while no cut holds this shard's writes, and a cut waits for
        the prepares under way (:meth:`prepares_done`): so the parts a shard lists when it
        freezes are all it will hold until it thaws. Else a batch could be prepared here
        during a cut, decided, and applied by the cut in the other shards only."""
        await self.writes.admitted()
        with self._prepares.one():
            yield

    async def prepares_done(self) -> None:
        """Wait until no prepare is under way."""
        await self._prepares.none()

    async def prepare(self, txn: str, root_url: str, changes: list[Change],
                      values: list) -> Exception | str | tuple[int, int]:
        """Prepare this shard's part of batch ``txn``: once it is durable and its keys locked,
        its number among the parts this shard prepared (see :meth:`began`); ``"busy"`` if
        another batch holds one of its keys; or the failure of its conditions (then nothing
        is held)."""
        async with self._preparing_part():
            return await self._prepare(txn, root_url, changes, values)

    def _check_open(self) -> None:
        self.writes.check_usable()
        if self.closing:
            raise StoreClosedError("the store is closing: it prepares no more batches")

    async def _prepare(self, txn: str, root_url: str, changes: list[Change],
                       values: list) -> Exception | str | tuple[int, int]:
        self._check_open()
        if txn in self.parts:
            return self.parts[txn].number  # prepared already (a resent call)
        if not self.writes.lock([c.lkey for c in keyed(changes)], txn,
                                [(c.lkey, c.extra) for c in changes if c.op == OP_RANGE]):
            self.counters["txn_busy"] += 1
            return BUSY
        try:
            failure = await self.writes.check(changes)
            if failure is not None:
                self.writes.unlock(txn)
                return failure
            return await self._hold(txn, Part(root_url, tuple(changes), tuple(values),
                                              after=self.writes.next_sqn))
        except BaseException:
            self.writes.unlock(txn)
            raise

    async def prepare_ingest(self, txn: str, root_url: str, journal: tuple,
                             ssts: tuple) -> tuple[int, int]:
        """Prepare this shard's part of a bulk write across shards: its files (written
        already) to install once the batch commits. No key is locked: a bulk write's rows
        are newer than every write acknowledged before it commits. Refused
        (``IngestConflictError``, nothing held) once the store gave out an SQN above the
        write's window: a later bulk write was installed first, so this one never can be."""
        async with self._preparing_part():
            self._check_open()
            if txn in self.parts:
                return self.parts[txn].number
            check_install_order(journal, self.writes.next_sqn, self.installing)
            number = await self._hold(txn, Part(root_url, files=(tuple(journal), tuple(ssts))))
            if self.installing > min(j.min_sqn for j in journal):
                # a higher write began installing while the part was written, and settled
                # the parts below it without this one: drop it, and refuse
                await self._settle(txn, ABORT)
                check_install_order(journal, self.writes.next_sqn, self.installing)
            return number

    async def _hold(self, txn: str, part: Part) -> tuple[int, int]:
        await self.store.put_if_absent_async(part_name(txn), encode_part(part), unique=True)
        # A close that began while the part was written refuses it: a writer opened since
        # (a moved shard's, or a reopen's) may have listed the parts before this one landed,
        # and would answer its commit as done. The client aborts the batch on the refusal,
        # and a writer that finds the part settles it by that decision.
        try:
            self.writes.check_usable()
        except LeveledError:
            self.counters["txn_refused_stopped"] += 1
            raise
        held = self.parts[txn] = Prepared(part)
        self.prepared += 1
        held.number = self.began()
        self.counters["txn_prepared"] += 1
        held.expiry = self.tasks.start(self._expire(txn), f"txn {txn}")
        return held.number

    def began(self) -> tuple[int, int]:
        """How many parts this shard has prepared, as ``(writer epoch, count)``: it only grows,
        across restarts too (a new writer settles every part before it answers)."""
        return (self.epoch, self.prepared)

    def pending(self) -> list[str]:
        """The batches whose parts wait for their decision (not those applied and being
        released)."""
        return [txn for txn, part in self.parts.items() if not part.applied]

    async def commit(self, txn: str, numbers: dict | None = None) -> list[int]:
        """Apply a prepared part; returns its changes' SQNs. A part applied already (by a
        cut or a timeout, before the client's call) answers its SQNs for :data:`NOTED_S`,
        then ``[]``. ``numbers`` (shard -> its part's number there) is noted with the part's
        keys for a while (see :meth:`notes`)."""
        if txn in self.parts and numbers:
            self.parts[txn].numbers = numbers
        if txn not in self.parts:
            return self.applied_sqns.get(txn, [])
        return await self._settle(txn, COMMIT)

    async def abort(self, txn: str) -> None:
        """Drop a prepared part (nothing of it was ever visible)."""
        await self._settle(txn, ABORT)

    async def _settle(self, txn: str, decision: str) -> list[int]:
        part = self.parts.get(txn)
        if part is None:
            return []
        if part.settled is None:
            part.settled = asyncio.ensure_future(self._apply(txn, part, decision))
        return await asyncio.shield(part.settled)

    async def _apply(self, txn: str, part: Prepared, decision: str) -> list[int]:
        """Apply or drop the part; the answer comes once it is durable, and the part object
        is deleted (then the keys unlock) right after. A dropped bulk write's files are left
        to garbage collection."""
        sqns: list[int] = []
        if decision == COMMIT:
            try:
                if part.part.files is not None and installed_already(
                        part.part, self.writes.next_sqn):
                    self.counters["txn_applied_before"] += 1  # found again after its install
                elif part.part.files is not None:
                    await self.settle_lower(part.part.first_sqn)
                    await self.install(*part.part.files, txn)
                elif (part.found or part.attempted) and applied_already(
                        part.part, newest := await self.writes.newest_sqns(part.lkeys)):
                    # it outlived its apply (a restart), or an apply whose outcome was in
                    # doubt landed after all: its keys hold its own SQNs
                    self.counters["txn_applied_before"] += 1
                    sqns = list(newest)
                else:  # its conditions were checked under the lock
                    if part.numbers is None:  # not applied by the client: the record says
                        part.numbers = await read_numbers(self._root(part.part.root_url), txn)
                    changes = [c._replace(condition=NO_CONDITION)
                               for c in written(part.part.changes)]  # not a txn's checks
                    part.attempted = True
                    sqns = await self.writes.put_many(
                        changes, ValueBatch(inline=list(part.part.values[:len(changes)])), txn,
                        batch_tag(txn, part.numbers or ()))
            except BaseException:
                part.settled = None  # the next call (or the expiry) tries again
                raise
            if part.numbers:
                self._note(part)
            self.applied_sqns[txn] = sqns
            self._applied_order.append((time.monotonic(), txn))
            while self._applied_order and self._applied_order[0][0] < time.monotonic() - NOTED_S:
                self.applied_sqns.pop(self._applied_order.popleft()[1], None)
        part.applied = True
        release = self.tasks.start(self._release(txn, part, decision), f"txn {txn} release")
        self._releases.add(release)
        release.add_done_callback(self._releases.discard)
        return sqns

    async def settle_lower(self, first_sqn: int) -> None:
        """Before a bulk write from SQN ``first_sqn`` is installed (as a part or whole),
        settle the bulk parts whose windows lie below it (see
        :func:`~leveled_ray.manifest.txn_records.settle_before`). From now on no part
        below it is prepared: it could be prepared after this settling, then never go in."""
        self.installing = max(self.installing, first_sqn)
        held = {t: p.part for t, p in self.parts.items() if not p.applied}
        for lower in settle_before(held, first_sqn):
            part = self.parts.get(lower)
            if part is None or part.applied:
                continue
            decision = await self._decision(lower, part)
            self.counters["txn_decided_here"] += decision == ABORT
            await self._settle(lower, decision)

    async def _decision(self, txn: str, part: Prepared) -> str:
        """The decision on held part ``txn``, aborting the batch if it is undecided."""
        try:
            return await decide(self._root(part.part.root_url), txn, ABORT)
        except NotFound:
            # Its record existed, then went: a client deletes its record once every part is
            # in, and GC keeps a record while a part is held. So this part is (going) in.
            self.counters["txn_record_gone"] += 1
            return COMMIT

    async def _release(self, txn: str, part: Prepared, decision: str) -> None:
        """Unlock the keys, then delete the part object, retrying until the store lets it
        (the keys do not wait for that: a part found at a restart after its keys were
        written again is recognised as applied, see ``applied_already``)."""
        self.writes.unlock(txn)
        if part.expiry is not None:
            part.expiry.cancel()
        self.counters["txn_committed" if decision == COMMIT else "txn_aborted"] += 1
        backoff = 1.0
        while True:
            try:
                await self.store.delete_async(part_name(txn))
                break
            except LeveledError:
                self.counters["txn_delete_retries"] += 1
                await asyncio.sleep(backoff)  # the object store answers later
                backoff = min(2 * backoff, 60.0)
        del self.parts[txn]

    # -- what a batched read needs to see whole batches (see leveled_ray.cluster.fanout) --

    def _note(self, part: Prepared) -> None:
        """Remember, for :data:`NOTED_S`, that these keys were written by a batch with parts
        of these numbers in these shards."""
        now = time.monotonic()
        for change in written(part.part.changes):
            self.noted[change.lkey] = part.numbers
            self._noted_order.append((now, change.lkey, part.numbers))
        while self._noted_order and self._noted_order[0][0] < now - NOTED_S:
            _, lkey, numbers = self._noted_order.popleft()
            if self.noted.get(lkey) is numbers:
                del self.noted[lkey]

    def notes(self, lkeys: list[bytes]) -> dict[int, dict]:
        """For each position of ``lkeys`` written by a recent cross-shard batch: that batch's
        part numbers by shard. A batched read that finds one can tell whether its read of
        another shard came before that shard prepared its part (then it reads again)."""
        noted = self.noted
        return {i: noted[k] for i, k in enumerate(lkeys) if k in noted} if noted else {}

    async def _expire(self, txn: str) -> None:
        """Decide a part no one decided in time: abort, unless the record says commit."""
        await asyncio.sleep(self.options.txn_timeout_s)
        while txn in self.parts and not self.parts[txn].applied:
            try:
                decision = await self._decision(txn, self.parts[txn])
                self.counters["txn_decided_here"] += 1
                await self._settle(txn, decision)
            except LeveledError:
                await asyncio.sleep(self.options.txn_timeout_s)  # the store answers later

    async def recover(self) -> int:
        """Settle every part found in the store (after a restart), from its record: applied
        if it says commit, dropped otherwise (an undecided part is aborted here). Returns how
        many were found. Then keep settling parts that land later (see :meth:`_sweep`)."""
        found = await self._settle_found(lambda meta: True)
        self.counters["txn_recovered"] += found
        self.tasks.start(self._sweep(), "txn sweep")
        return found

    async def _settle_found(self, wanted) -> int:
        """Hold and settle the parts in the store that this shard does not hold and that
        ``wanted(meta)`` picks; bulk parts in window order (a higher one settles the lower
        ones first anyway). Returns how many were found."""
        found = [m.path for m in await self.store.list_async("txn/")
                 if txn_of_part(m.path) is not None and txn_of_part(m.path) not in self.parts
                 and wanted(m)]
        taken = []
        for name in found:
            txn = txn_of_part(name)
            try:
                part = decode_part(await self.store.get_async(name), name)
            except NotFound:
                continue
            if txn in self.parts:
                continue
            held = self.parts[txn] = Prepared(part)
            held.found = True
            self.writes.lock(held.lkeys, txn)
            taken.append(txn)
        for txn in sorted(taken, key=lambda t: self.parts[t].part.first_sqn or 0):
            part = self.parts.get(txn)
            if part is None or part.applied:
                continue
            await self._settle(txn, await self._decision(txn, part))
        return len(found)

    async def _sweep(self) -> None:
        """Every ``txn_timeout_s``, settle the parts this shard does not hold that are older
        than twice that: a part written by a writer that died while writing it can land after
        its successor's :meth:`recover` listed the store (its request was in flight)."""
        period = self.options.txn_timeout_s
        while True:
            await asyncio.sleep(period)
            oldest = self.clock() - 2 * period
            try:
                swept = await self._settle_found(lambda meta: meta.last_modified <= oldest)
                self.counters["txn_swept"] += swept
            except LeveledError:
                pass  # the store answers later: the next sweep tries again

    async def settle_all(self, wait_s: float) -> None:
        """Before a close: prepare no more parts, decide and settle every part held (a batch
        not yet decided is aborted: its client is told it conflicted), and wait up to
        ``wait_s`` for their part objects to be deleted. So a shard closed cleanly holds no
        part, and a split of it need not wait for one. A part it cannot settle now (the
        object store fails) is left to the next open, as a killed shard's are."""
        self.closing = True
        await self.prepares_done()
        for txn in self.pending():
            part = self.parts.get(txn)
            if part is None or part.applied or part.part.files is not None:
                continue  # a bulk part waits for its own commit: installs are the writer's
            try:
                await self._settle(txn, await self._decision(txn, part))
            except LeveledError:
                return
        if self._releases:
            await asyncio.wait(self._releases, timeout=wait_s)

    async def close(self) -> None:
        """Stop deciding parts (a shard settles those left when it reopens)."""
        await self.tasks.cancel(*self.tasks.running)
