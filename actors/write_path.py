"""Admitting writes: a ``put_many`` is checked, given SQNs and queued for group commit, and
a bulk write's files are installed between two groups.

A write is admitted in one step with no await from its checks to its SQNs: its conditions are
checked and its index changes resolved against every change before it, durable or still
pending (see :mod:`.ledger_cache`), so no other change can slip in between. Writers are slowed
while the Ledger falls behind, and wait while an earlier write's outcome is being settled.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

from ..codec import (
    NO_CONDITION,
    OP_CHECK,
    OP_PUT,
    OP_RANGE,
    PACKED_EXTRA,
    RANGE_OF_KEYS,
    Change,
    LedgerRows,
    holds_index_entries,
    keyed,
    range_digest,
    written,
)
from ..codec.conditions import Depends, check_parts
from ..codec.index_terms import change_entry, resolve_all
from ..codec.keys import split_object_key
from ..errors import ConditionFailedError, FencedError, InvalidArgumentError, StoreClosedError
from ..files.journal import JournalInfo
from ..files.sst import SstInfo
from ..manifest.ingest import (
    MAX_SQN,
    WINDOW_SQNS,
    IngestConflictError,
    check_install_order,
    reserve_base,
)
from ..options import Options
from ..read.views import LedgerFiles
from .change_tail import ChangeTail
from .group_commit import Group, GroupCommit, JournalColumns
from .key_locks import KeyLocks
from .ledger_cache import LedgerCache
from .live_view import LiveView
from .metrics import Observations
from .remote import ValueBatch
from .write_parts import WrittenBy, passed, without_checks

#: Bytes of the newest changes kept in memory for listeners (see :mod:`.change_tail`).
TAIL_BYTES = 16 << 20


class WritePath(KeyLocks):
    """The Bookie's writes: their admission, their SQNs, the group commit that makes them
    durable (:class:`~.group_commit.GroupCommit`, whose owner this is), and whether writes
    are still accepted (``closing``, ``closed``, ``broken``: see :meth:`check_usable`)."""

    def __init__(self, options: Options, cache: LedgerCache, view: LiveView, *,
                 head_only: str | None, observations: Observations):
        self.options, self.cache, self.view, self.head_only = options, cache, view, head_only
        self.writer = GroupCommit(options, self)
        #: Close began (no write is admitted), ended; what stopped the store, if anything did.
        self.closing = self.closed = False
        self.broken: BaseException | None = None
        self.next_sqn = 1
        self.durable_sqn = 0
        self.tail = ChangeTail(TAIL_BYTES)  # for listeners
        #: Whether any object may hold index terms: then every change is resolved against
        #: the object's current entry (see :mod:`leveled_ray.codec.index_terms`).
        self.indexed = False
        # Closed while a bulk write is installed, or a cut holds writes: no change gets an SQN
        # meanwhile (but the parts a cut lets in). ``_gate`` wakes waiters when either changes.
        self.writes_open = True
        self.cut_lets_in: set[str] = set()
        self._gate = asyncio.Event()
        self._install_lock = asyncio.Lock()
        # One install at a time, and no group admitted while one runs (also under a cut,
        # which lets committed parts in): the install moves the persisted SQN past every
        # change before it, so a change written meanwhile would be left out of the Ledger.
        self._one_install = asyncio.Lock()
        self._installing = False
        self.reserved_upto = 0  # end of the SQN windows reserved for bulk writes
        #: Bulk writes begun and not yet installed: window base -> when, in wall time.
        self.bulk_begun: dict[int, float] = {}
        #: Ledger key -> the cross-shard batch whose prepared part holds it (see
        #: :mod:`.participant`): other writes, and reads, of the key wait until it is decided.
        self.locks: dict[bytes, str] = {}
        #: The key ranges a transaction checks, by its batch: no other write goes into one
        #: until it is decided (a phantom would slip in after the check).
        self.range_locks: dict[str, list[tuple[bytes, bytes]]] = {}
        self._range_ids = itertools.count()
        self.last_group: Group | None = None  # the newest group given SQNs
        self.written_by = WrittenBy()  # what recent transactions' parts wrote, by token
        self._unlocked = asyncio.Event()
        #: The cut that froze admissions (see leveled_ray.cluster.cut), and since when.
        self.frozen: tuple[str, float] | None = None
        self.observations = observations
        self.counters = {"changes": 0, "put_bytes": 0, "throttled_writes": 0, "throttle_ms": 0,
                         "cuts": 0, "cut_pause_ms_max": 0.0, "refused_while_waiting": 0}

    # -- whether writes are accepted --

    def check_usable(self, waited: bool = False) -> None:
        """Raise if writes are refused: after close, fencing, or the loss of the store's
        actors. ``waited``: for a write taken before, and waiting since (counted if refused)."""
        if waited and (self.broken is not None or self.closing or self.closed):
            self.counters["refused_while_waiting"] += 1
        if isinstance(self.broken, FencedError):
            raise self.broken.again()
        if self.broken is not None:
            raise StoreClosedError(f"the store stopped after an error: {self.broken}")
        if self.closing or self.closed:
            raise StoreClosedError("the store is closed")

    def begin_close(self) -> None:
        """No write is admitted from now on: those waiting for admission or for a locked key
        look again, and are refused."""
        self.closing = True
        self._wake_waiters()

    def end_close(self) -> None:
        """The store is closed: writes are refused, and so are reads."""
        self.closed = True

    def stopping(self) -> bool:
        """Whether the store is closing or stopped."""
        return self.closing or self.broken is not None

    def stopped(self, exc: BaseException) -> None:
        """Nothing more can be written: the first cause is kept."""
        self.broken = self.broken or exc

    # -- the SQNs, as the Journal's replay finds them --

    def replayed(self, top: int) -> None:
        """The Journal's replay made changes up to SQN ``top`` durable."""
        self.durable_sqn = max(self.durable_sqn, top)

    def resume(self, next_sqn: int, indexed: bool) -> None:
        """Writes resume at ``next_sqn`` once the replay is done; ``indexed``: whether any
        object may hold index terms."""
        self.next_sqn = next_sqn
        self.tail.jump(next_sqn - 1)  # listeners read older changes' files
        self.indexed = indexed

    async def put_many(self, changes: list[Change], values: ValueBatch,
                       txn: str | None = None, batch: bytes | None = None) -> list[int]:
        """Write changes as one atomic, durable group; returns their SQNs in order. ``txn``
        names the cross-shard batch applying its prepared part (its own locks let it pass),
        ``batch`` its tag, which the Journal keeps with each change (see
        :mod:`~leveled_ray.manifest.batch_tags`)."""
        if not changes:
            return []
        if txn is None and any(c.op == OP_RANGE for c in changes):
            return await self._put_ranged(changes, values, batch)
        (first,) = await self.put_parts(changes, [len(changes)], values, txn, batch)
        if isinstance(first, Exception):
            raise first
        return list(range(first, first + len(written(changes))))

    async def _put_ranged(self, changes: list[Change], values: ValueBatch,
                          batch: bytes | None) -> list[int]:
        """A transaction that checks key ranges, on one shard: its keys and ranges are locked
        (all at once, so no two such writes wait for each other), the ranges checked, then
        the changes written as one group, and the locks let go."""
        txn = f"ranges-{next(self._range_ids)}"
        keys = [c.lkey for c in keyed(changes)]
        ranges = [(c.lkey, c.extra) for c in changes if c.op == OP_RANGE]
        while not self.lock(keys, txn, ranges):
            self.check_usable(waited=True)
            await self._unlocked.wait()
        try:
            failure = await self.check(changes)
            if failure is not None:
                raise failure
            return await self.put_many(changes, values, txn, batch)
        finally:
            self.unlock(txn)

    async def put_parts(self, changes: list[Change], counts: list[int], values: ValueBatch,
                        txn: str | None = None, batch: bytes | None = None,
                        deps: list[Depends | None] | None = None) -> list[int | Exception]:
        """Write several callers' parts (``counts`` changes each, in order) in one step. Each
        part's conditions are checked on its own; the parts that pass are written as one
        durable group. Returns each part's first SQN, or the error of that part alone. A
        transaction's checks (``OP_CHECK``, with no value: they come after its writes) are
        checked with the conditions and not written. ``deps``: each transaction part's
        :class:`~leveled_ray.codec.conditions.Depends` (its reads of writes in flight)."""
        if self.head_only and any(c.op == OP_PUT and c.extra[:1] != PACKED_EXTRA
                                  for c in changes):
            raise InvalidArgumentError("this store is head_only: write to it through a "
                                       "handle that knows (lr.open(..., head_only=...))")
        lkeys = [c.lkey for c in keyed(changes)]  # a range check's key is its range's start
        if (owns := self.view.files.owns) is not None:  # a split shard: its own keys only
            owns.refuse_others(lkeys, self.view.url)
        conditional = [c.lkey for c in keyed(changes) if c.condition != NO_CONDITION]
        await self.writer.wait_settled()
        self.check_usable()
        while True:
            await self._admission(txn)
            await self.wait_unlocked(lkeys if self.locking else (), txn,
                                     refused=lambda: self.check_usable(waited=True))
            await self._backpressure()
            stored: dict[bytes, tuple | None] = {}
            if conditional or self.indexed:
                stored = await self.view.current_entries(
                    {c.lkey for c in changes} if self.indexed else set(conditional))
                self.check_usable(waited=True)
            if self._admits(txn) and not (self.locking and self.locked(lkeys, txn)):
                break  # else a bulk write or a cut holds writes, or a key was locked: again
        # A close that began while it waited refuses it: its writer takes no more groups.
        self.check_usable(waited=True)
        # From here to the allocation nothing awaits, so no other change can slip in.
        now_s = self.view.clock()
        known = lambda k: self.cache.known_entry(k, stored)  # noqa: E731
        failures: list = [None] * len(counts)
        if conditional:
            failures = check_parts(changes, counts, known, self.next_sqn, now_s, deps,
                                   self.written_by)
            if all(failures):
                return failures  # nothing to write
        checked = frozenset(c.lkey for c in changes if c.op == OP_CHECK)
        changes, counts = without_checks(changes, counts)
        if any(failures):
            changes, values = passed(changes, counts, failures, values)
        if not changes:  # transactions that only checked, and held
            return [failure or self.next_sqn for failure in failures]
        if self.indexed or any(c.indexes for c in changes):
            changes = resolve_all(changes, known, now_s)
            self.indexed = True
        group = self._allocate(changes, values, batch, checked)
        if deps:
            self.written_by.remember(changes, counts, failures, deps, group.sqns.start)
        await group.future
        results, sqn = [], group.sqns.start
        for count, failure in zip(counts, failures):
            results.append(failure or sqn)
            sqn += 0 if failure else count
        return results

    # -- admission: closed by a bulk install or a cut --

    async def admitted(self) -> None:
        """Wait while a cut or a bulk install holds writes (what a part's prepare waits for:
        see :meth:`Participant.prepare <.participant.Participant.prepare>`)."""
        await self._admission(None)

    def _admits(self, txn: str | None) -> bool:
        return not self._installing and (self.writes_open or txn in self.cut_lets_in)

    async def _admission(self, txn: str | None) -> None:
        while not self._admits(txn):
            self.check_usable(waited=True)  # a close wakes the waiters (begin_close)
            await self._gate.wait()

    def _wake_waiters(self) -> None:
        """At close: the writes waiting for admission or for a locked key look again, and
        are refused (nothing would admit or unlock them)."""
        woken, self._gate = self._gate, asyncio.Event()
        woken.set()
        woken, self._unlocked = self._unlocked, asyncio.Event()
        woken.set()

    def _set_gate(self, open_: bool, lets_in: set[str] = frozenset()) -> None:
        self.writes_open, self.cut_lets_in = open_, set(lets_in)
        woken, self._gate = self._gate, asyncio.Event()
        woken.set()

    async def newest_sqns(self, lkeys: list[bytes]) -> list[int | None]:
        """The SQN of each key's newest entry, durable or pending (``None``: none)."""
        await self.writer.wait_settled()
        stored = await self.view.current_entries(set(lkeys))
        entries = [self.cache.known_entry(k, stored) for k in lkeys]
        return [None if e is None else e[0] for e in entries]

    async def check(self, changes: list[Change]) -> Exception | None:
        """The failure of ``changes``' conditions against every change before them, durable
        or pending, or ``None``: a prepared part's check (its keys and ranges are locked
        already, so no other write can change them until it is decided)."""
        if all(c.condition == NO_CONDITION for c in changes):
            return None
        await self.writer.wait_settled()
        for change in changes:
            if change.op == OP_RANGE:
                failure = await self._check_range(change)
                if failure is not None:
                    return failure
        conditional = {c.lkey for c in keyed(changes) if c.condition != NO_CONDITION}
        stored = await self.view.current_entries(conditional)
        self.check_usable()
        known = lambda k: self.cache.known_entry(k, stored)  # noqa: E731
        return check_parts(changes, [len(changes)], known, self.next_sqn, self.view.clock())[0]

    async def _check_range(self, change: Change) -> ConditionFailedError | None:
        """The failure of a transaction's range check (see
        :func:`~leveled_ray.codec.range_check`), or ``None``."""
        last = self.last_group  # the range is locked: the changes in it are all given SQNs
        if last is not None and not last.future.done():
            await asyncio.wait([last.future])  # so once these are durable, they are cached
        found = await self.view.live_range(change.lkey, change.extra, self.durable_sqn)
        self.check_usable()
        if change.condition == RANGE_OF_KEYS:  # an index range: which entries, not when
            found = [(k, 0) for k, _ in found]
        if range_digest(found) == (change.size, change.vhash):
            return None
        bucket, start = split_object_key(change.lkey)
        return ConditionFailedError(
            f"the objects of bucket {bucket!r} from {start!r} changed since they were read",
            ((bucket, start, change.size, len(found)),))

    async def _backpressure(self) -> None:
        waited_ms = await self.cache.backpressure(self.options, self.stopping)
        if waited_ms is not None:
            self.counters["throttled_writes"] += 1
            self.counters["throttle_ms"] += waited_ms
            self.check_usable()

    def _allocate(self, changes: list[Change], values: ValueBatch,
                  batch: bytes | None = None, checked: frozenset[bytes] = frozenset()
                  ) -> Group:
        """Give the changes SQNs and queue them for the next journal file (``checked``: the
        keys its transactions checked, unwritten)."""
        lm = int(self.view.clock() * 1000)
        first = self.next_sqn
        self.next_sqn += len(changes)
        sqns = range(first, first + len(changes))
        # Work on columns: transposing the tuples and zipping columns runs in C.
        ops, lkeys, sizes, hashes, indexes, expiries, extras, _ = zip(*changes)
        rows = LedgerRows.from_changes(sqns, ops, lkeys, sizes, hashes, indexes, expiries,
                                       extras, lm)
        self.cache.add_pending(lkeys, map(change_entry, changes, sqns, itertools.repeat(lm)))
        group = Group(sqns, JournalColumns(first, lm, ops, lkeys, indexes, expiries, extras,
                                           batch),
                      values, rows, sum(sizes) + sum(map(len, lkeys)), checked=checked)
        self.writer.add(group)
        self.last_group = group
        return group

    def durable(self, groups: list[Group], info: JournalInfo) -> None:
        """Groups are durable: make them visible and queue their Ledger changes."""
        self.view.journal.extend([info])
        self.observations.add("leveled_group_commit_changes",
                              sum(len(g.sqns) for g in groups))
        for group in groups:
            self.cache.add_durable(group.rows)
            self.view.remember_values(group.sqns, group.values.resolved, group.nbytes)
            self.cache.release_pending(group.keys, group.sqns)
            self.durable_sqn = max(self.durable_sqn, group.sqns[-1])
            self.tail.add(group)
            self.counters["changes"] += len(group.sqns)
            self.counters["put_bytes"] += group.nbytes

    def release(self, group: Group) -> None:
        """A group failed: its changes are no longer pending."""
        self.cache.release_pending(group.keys, group.sqns)

    # -- cuts of a sharded store (see leveled_ray.cluster.cut) --

    async def freeze(self, cut_id: str, held: Callable[[], None] = lambda: None) -> bool:
        """Stop admitting writes for cut ``cut_id`` and wait until every admitted one is
        durable; ``False`` (nothing done) while another cut or a bulk install holds them.
        ``held()`` is called once writes are held, before that wait (the hold's time limit
        counts from then: the admitted writes may take long)."""
        if self._install_lock.locked():
            return False
        await self._install_lock.acquire()
        self.frozen = (cut_id, time.monotonic())
        self._set_gate(False)
        held()
        await self.writer.idle.wait()
        return True

    def let_in(self, cut_id: str, txns: list[str]) -> None:
        """While cut ``cut_id`` holds writes, admit the parts of these committed batches."""
        if self.frozen is not None and self.frozen[0] == cut_id:
            self._set_gate(False, self.cut_lets_in | set(txns))

    def thaw(self, cut_id: str) -> bool:
        """Admit writes again, if cut ``cut_id`` still holds them; returns whether it did
        (``False``: they were admitted again already, so the cut did not hold them
        throughout)."""
        if self.frozen is None or self.frozen[0] != cut_id:
            return False
        paused_ms = (time.monotonic() - self.frozen[1]) * 1000
        self.frozen = None
        self._set_gate(True)
        self._install_lock.release()
        self.counters["cuts"] += 1
        self.counters["cut_pause_ms_max"] = round(max(self.counters["cut_pause_ms_max"],
                                                      paused_ms), 3)
        return True

    # -- bulk writes (see leveled_ray.bulk.write) ---

    def reserve_bulk(self, at: int | None = None) -> tuple[int | None, int]:
        """Reserve a window of SQNs for a bulk write, above every SQN given out so far: the
        lowest such window, or the one from ``at`` (a write across shards reserves one base
        in every shard, so that its windows and another's are in the same order in each).
        Returns its base (``None`` if ``at`` is below the lowest) and the lowest base now."""
        self.check_usable()
        lowest = reserve_base(self.next_sqn - 1, self.reserved_upto)
        if at is not None and at < lowest:
            return None, lowest
        base = lowest if at is None else at
        if base + WINDOW_SQNS > MAX_SQN:
            raise IngestConflictError("the store's SQNs are used up for bulk writes")
        self.reserved_upto = base + WINDOW_SQNS
        self.bulk_begun[base] = time.time()
        return base, reserve_base(self.next_sqn - 1, self.reserved_upto)

    def bulk_installed(self, min_sqn: int) -> None:
        """The bulk write whose window holds ``min_sqn`` is in: GC need not wait for it."""
        began = [base for base in self.bulk_begun if base <= min_sqn]
        if began:
            del self.bulk_begun[max(began)]

    def bulk_since(self, window_s: float) -> float | None:
        """When the oldest bulk write begun within ``window_s`` (wall time) began, if any: its
        files, written by other processes, may still be installed. Older ones cannot be
        (:func:`~leveled_ray.admin.gc.check_publishable`), nor do they hold GC back."""
        oldest = time.time() - window_s
        self.bulk_begun = {b: t for b, t in self.bulk_begun.items() if t >= oldest}
        return min(self.bulk_begun.values(), default=None)

    async def install(self, journal: list[JournalInfo], ssts: list[SstInfo],
                      install: Callable[[], Awaitable[tuple[LedgerFiles, bool]]],
                      txn: str | None = None) -> LedgerFiles:
        """Install a bulk write's files with ``install()``, between two groups: writes pause
        until every admitted change is durable, and resume once the files are in; first, it
        waits for the prepared batches holding keys in its range (:meth:`locked_in`). ``txn``
        names the cross-shard bulk write whose part this is: a cut that lets it in installs
        it while the cut holds writes (see :meth:`let_in`). ``install()`` answers the Ledger
        files and whether ``journal`` is now in the store: a streaming batch applied before
        is not, and then nothing here moves (neither the SQNs nor the journal the change
        feed reads)."""
        while True:
            held = self.locked_in(ssts)
            if held:  # a prepared batch's conditions hold until it is applied, after this
                await self.wait_unlocked(held)
                continue
            if txn is not None and self.frozen is not None and txn in self.cut_lets_in:
                return await self._install(journal, ssts, install)  # the cut holds the lock
            if not self._install_lock.locked():
                break
            await self._gate.wait()  # a cut (which may let this part in) or another install
        async with self._install_lock:
            self._set_gate(False)
            try:
                return await self._install(journal, ssts, install)
            finally:
                self._set_gate(True)

    async def _install(self, journal, ssts, install) -> LedgerFiles:
        async with self._one_install:
            self._installing = True
            try:
                await self.writer.idle.wait()  # what was admitted is durable; no more is
                return await self._install_now(journal, ssts, install)
            finally:
                self._installing = False
                self._set_gate(self.writes_open, self.cut_lets_in)  # wake who waited

    async def _install_now(self, journal, ssts, install) -> LedgerFiles:
        self.check_usable()
        check_install_order(journal, self.next_sqn)
        files, installed = await install()
        if not installed:
            return files
        self.view.journal.extend(journal)
        top = max(j.max_sqn for j in journal)
        self.next_sqn = max(self.next_sqn, top + 1)
        self.durable_sqn = max(self.durable_sqn, top)
        self.tail.jump(top)
        self.indexed = self.indexed or holds_index_entries(s.min_key for s in ssts)
        return files
