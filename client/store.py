"""The plain store handle, :class:`Store` (``lr.open`` starts its Bookie: :mod:`.bookies`).

A :class:`Store` is a thin, picklable handle on the store's Bookie actor. It validates every
change before sending it (a rejected call changes nothing), batches where it can, and raises
leveled-ray's own errors rather than Ray's. Every call has an awaitable ``*_async`` twin for
asyncio applications.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future

from .. import roles
from ..actors.remote import ValueBatch, pack
from ..admin.backup import backup_version
from ..admin.progress import progress_of
from ..clock import Clock, system_clock
from ..codec import (
    Change,
    Delete,
    Head,
    Put,
    check_put_size,
    checked_key,
    checked_keys,
    delete_change,
    heads_of,
    make_change,
    put_change,
)
from ..codec import head_only as head_only_mode
from ..codec.tictac import DEFAULT_SIZE, TicTacTree, check_size
from ..errors import InvalidArgumentError, StoreClosedError
from ..files.store import ObjectStore
from ..files.store_config import parse_url
from ..files.sync import two_forms, with_sync_twins
from ..manifest.model import Checkpoint, HistoryLease
from ..options import Options, check_number
from ..read.history_view import check_moment
from ..read.queries import Queries, check_index_query
from .calls import Answer, Call, Submitted, _await, _get, bookie_call, read_call
from .coalesce import Coalescer, Part
from .in_flight_writes import InFlightWrites
from .listen import Listener
from .snapshot import Snapshot
from .store_transactions import StoreTransactions

#: Index queries with ``max_results`` up to this are answered by the Bookie in one round trip;
#: larger or unbounded ones stream from a snapshot in the caller's process.
BOOKIE_QUERY_MAX = 10_000
#: Limits of one call of coalesced puts and deletes (see :mod:`.coalesce`).
COALESCE_MAX_CHANGES = 1000
COALESCE_MAX_BYTES = 8 << 20
#: How long a call of several parts waits for its callers' next parts (``0``: it never
#: waits, and no helper thread runs, as in the deterministic simulation).
COALESCE_LINGER_S = 0.01
#: Sends of a close whose Bookie is lost during it (Ray's "actor unavailable": it may be
#: restarting, or unreachable for a moment) before its actor is ended all the same.
CLOSE_TRIES = 5


class _SnapshotReleaser:
    """Releases a snapshot through the Bookie that registered it."""

    def __init__(self, actor):
        self.actor = actor

    async def __call__(self, snapshot_id: str) -> None:
        try:
            await _await(self.actor.release_snapshot.remote(snapshot_id))
        except StoreClosedError:
            pass  # a closed store has no registrations left to release

    def soon(self, snapshot_id: str) -> None:
        """Release without waiting for the answer."""
        self.actor.release_snapshot.remote(snapshot_id)


@with_sync_twins
class Store(Queries, StoreTransactions, roles.KeyReads, roles.Queries, roles.History, roles.Writes,
            roles.PointsInTime, roles.Transactions, roles.Checkpoints, roles.HistoryLeases,
            roles.Maintenance, roles.Backups):
    """A handle on an open store. Picklable: pass it to Ray tasks to use the store there.

    Example::

        store = lr.open("file:///tmp/db")
        sqn = store.put("users", "alice", b"v1", indexes=[("add", "city_bin", "paris")])
        assert store.get("users", "alice") == b"v1"
        store.put("users", "alice", b"v2", if_sqn=sqn)
        store.close()
    """

    def __init__(self, actor, options: Options, url: str, name: str | None, info: dict,
                 clock: Clock = system_clock):
        self._actor = actor
        self.options = options
        self.clock = clock
        self.url = url
        self.name = name
        self.open_info = info
        self.head_only: str | None = info.get("head_only")
        self._writes = Coalescer(
            self._send_parts, max_changes=COALESCE_MAX_CHANGES,
            max_bytes=min(COALESCE_MAX_BYTES, options.journal.max_file_bytes // 2),
            linger_s=COALESCE_LINGER_S, future=lambda ref: ref.future(), wait=_get)
        self._in_flight_writes = InFlightWrites()
        self._reads = Coalescer(self._send_reads, max_changes=COALESCE_MAX_CHANGES,
                                max_bytes=COALESCE_MAX_BYTES, linger_s=COALESCE_LINGER_S)

    def __reduce__(self):
        return (Store, (self._actor, self.options, self.url, self.name, self.open_info,
                        self.clock))

    def __repr__(self) -> str:
        return f"Store({self.url!r}, name={self.name!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- building requests (validation happens here, before anything is sent) --

    def _put_part(self, bucket, key, value, indexes, ttl, metadata, if_sqn, if_absent,
                  loop=None) -> Future:
        change, value = put_change(bucket, key, value, self.options, self.clock(),
                                   indexes=indexes, ttl=ttl, metadata=metadata, if_sqn=if_sqn,
                                   if_absent=if_absent)
        if self.head_only:
            change = head_only_mode.ledger_change(change, value,
                                                  self.options.max_head_only_value_bytes)
        return self._writes.submit([change], [value], change.size, loop=loop)

    def _delete_part(self, bucket, key, indexes, if_sqn, loop=None) -> Future:
        change, _ = delete_change(bucket, key, self.options, indexes=indexes, if_sqn=if_sqn)
        return self._writes.submit([change], [None], 0, loop=loop)

    def _send_parts(self, parts: list[Part]):
        """One Bookie call for the coalesced puts and deletes of this process: its ref."""
        changes = [c for part in parts for c in part.changes]
        values = [v for part in parts for v in part.values]
        counts = [len(part.changes) for part in parts]
        deps = [part.deps for part in parts]
        return self._actor.put_parts.remote(
            pack((changes, counts, deps) if any(deps) else (changes, counts)), values)

    def _changes(self, items: Iterable[Put | Delete]) -> tuple[list[Change], list, int]:
        """A ``put_many``'s checked changes, their values, and its size in bytes."""
        if isinstance(items, (Put, Delete)) or not isinstance(items, Iterable):
            raise InvalidArgumentError("put_many takes a list of lr.Put / lr.Delete")
        now_s = self.clock()
        pairs = [make_change(item, self.options, now_s) for item in items]
        if self.head_only:
            limit = self.options.max_head_only_value_bytes
            pairs = [(head_only_mode.ledger_change(c, v, limit), v) for c, v in pairs]
        changes: list[Change] = [c for c, _ in pairs]
        return changes, [v for _, v in pairs], check_put_size(changes, self.options)

    def _put_many_ref(self, items: Iterable[Put | Delete]):
        changes, values, nbytes = self._changes(items)
        return self._actor.put_many.remote(pack(changes), ValueBatch.pack(values, nbytes))

    def _keys(self, pairs: Iterable[Sequence], what: str) -> list[bytes]:
        head_only_mode.refuse(self.head_only, what)
        return checked_keys(pairs, self.options)

    def _key(self, bucket, key, what: str) -> bytes:
        head_only_mode.refuse(self.head_only, what)
        return checked_key(bucket, key, self.options)

    # -- the API: each operation defined once; its sync and async forms come from it --

    @two_forms
    def put(self, bucket, key, value: bytes, *, indexes=(), ttl: float | None = None,
            metadata: dict | None = None, if_sqn: int | None = None,
            if_absent: bool = False) -> int:
        """Write ``value`` under ``(bucket, key)``; returns the SQN once the change is durable.

        ``indexes`` is a list of ``("add"|"remove", field, term)`` (``_bin`` fields take str
        terms, ``_int`` fields int terms). ``ttl`` expires the object after that many seconds.
        ``if_sqn`` / ``if_absent`` make the write conditional: ``ConditionFailedError`` and no
        change when the key's current SQN differs / the key exists. Cost: one round trip to the
        Bookie plus one journal write, both shared with concurrent writers: the puts and
        deletes of one process travel together while a call is in flight (see
        :mod:`.coalesce`), and the Bookie writes everything that arrives meanwhile as one
        journal file (group commit). A failed condition fails only its own put.
        """
        return Submitted(lambda loop: self._put_part(bucket, key, value, indexes, ttl, metadata,
                                                     if_sqn, if_absent, loop))

    @two_forms
    def delete(self, bucket, key, *, indexes=(), if_sqn: int | None = None) -> int:
        """Delete ``(bucket, key)`` (writes a tombstone); returns the change's SQN. Cost: as
        :meth:`put`'s, shared with concurrent writers the same way."""
        return Submitted(lambda loop: self._delete_part(bucket, key, indexes, if_sqn, loop))

    @bookie_call
    def put_many(self, items: Iterable[Put | Delete]) -> list[int]:
        """Write many changes as one atomic, durable group (one journal file); returns SQNs.

        If any item's condition fails, nothing is written. The group must fit in
        ``journal.max_file_bytes``. Cost: one round trip and one journal write for the whole group.
        """
        return self._put_many_ref(items)

    @bookie_call(read=True)
    def get(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)``, or ``None``. Cost: one round trip; inside the Bookie,
        at most one ranged GET per candidate SST plus one for the value (footers cached)."""
        return self._actor.get.remote(self._key(bucket, key, "get"))

    @bookie_call(read=True)
    def head(self, bucket, key) -> Head | None:
        """The object's :class:`Head` (SQN, size, last modified, hash, ...) without its value.
        Cost: :meth:`get`'s, without the value's read."""
        return Call(self._actor.head.remote(self._key(bucket, key, "head")),
                    lambda entry: heads_of([entry])[0])

    @bookie_call(read=True)
    def get_many(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """Values of many ``(bucket, key)`` pairs, ``None`` where absent. Cost: one round trip;
        inside the Bookie the keys are looked up together, file by file, and the values read
        by journal file."""
        return Call(self._actor.get_values.remote(self._keys(pairs, "get")),
                    lambda values: values.to_pylist())

    @bookie_call(read=True)
    def head_many(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """Heads of many ``(bucket, key)`` pairs, ``None`` where absent. Cost: one round trip;
        :meth:`get_many`'s lookups without the values."""
        return Call(self._actor.head_many.remote(self._keys(pairs, "head")), heads_of)

    async def snapshot_async(self, long_running: bool = False, *, values: bool = True,
                             timeout_s: float | None = None, at_sqn: int | None = None,
                             at_time: float | None = None) -> Snapshot:
        """A :class:`~leveled_ray.client.snapshot.Snapshot`: the store as of now, readable from any
        process until released or expired.

        It holds every acknowledged write and nothing later. ``long_running`` picks the long
        timeout (``Options.gc.long_snapshot_timeout_s``) over the short one; ``timeout_s`` sets it
        outright. ``values=False`` registers with the Penciller only (heads, not values).
        Cost: one round trip plus registering with the owners. The changes not yet in an SST
        travel as the Bookie's Arrow batches (at most ``max_unpersisted_keys``); no file is
        copied.

        ``at_sqn`` or ``at_time`` (Unix seconds) give the store exactly as it was then, within
        the history the Journal keeps (``Options.history_s``, leases); earlier raises
        :class:`~leveled_ray.errors.HistoryUnavailableError`. Cost: reading the changes since
        then, and each changed key's entry before them, from the Journal.
        """
        check_moment(at_sqn, at_time)  # before a snapshot is taken
        snap = await self._snapshot_async(long_running, values=values, timeout_s=timeout_s)
        if at_sqn is None and at_time is None:
            return snap
        try:
            return await snap.go_back_async(at_sqn, at_time)
        except BaseException:
            await snap.release_async()
            raise

    @bookie_call
    def _snapshot(self, long_running: bool = False, *, values: bool = True,
                  timeout_s: float | None = None) -> Snapshot:
        return Call(self._actor.snapshot.remote(self._snapshot_timeout(long_running, timeout_s),
                                                bool(values)), self._wrap_snapshot)

    def _snapshot_timeout(self, long_running: bool, timeout_s: float | None) -> float:
        if timeout_s is None:
            timeout_s = (self.options.gc.long_snapshot_timeout_s if long_running
                         else self.options.gc.snapshot_timeout_s)
        check_number("timeout_s", timeout_s, minimum=0, inclusive=False)
        if timeout_s > self.options.gc.long_snapshot_timeout_s:  # GC protects no longer than this
            raise InvalidArgumentError(f"timeout_s={timeout_s} is over long_snapshot_timeout_s="
                                       f"{self.options.gc.long_snapshot_timeout_s}")
        return float(timeout_s)

    def _wrap_snapshot(self, taken: dict) -> Snapshot:
        return Snapshot(taken["view"], taken["id"], taken["expires_at"], taken["values"],
                        _SnapshotReleaser(self._actor))

    @bookie_call
    def checkpoint(self, lifetime: float | None = None, name: str | None = None,
                   source: str | None = None, *, checkpoint_id: str | None = None) -> Checkpoint:
        """A durable checkpoint: a pin of the store as of now, kept in the manifest, that
        survives restarts and keeps its files until it expires (``lifetime`` seconds; ``None``:
        until deleted). It holds every write acknowledged before the call (no flush needed).
        ``source`` copies an existing checkpoint's pin instead. ``checkpoint_id`` gives it that
        id (a sharded store gives every shard's part the same). Returns
        ``Checkpoint(id, manifest_id, expires_at, created_at, name)``. Cost: one round trip and
        two manifest writes (the journal's catalog, then the checkpoint)."""
        return self._actor.checkpoint.remote(lifetime, name, source, checkpoint_id)

    @bookie_call(read=True)
    def list_checkpoints(self) -> list[Checkpoint]:
        """The live (unexpired) checkpoints. Cost: one round trip and a read of the newest
        manifest."""
        return self._actor.list_checkpoints.remote()

    @bookie_call
    def refresh_checkpoint(self, checkpoint_id: str,
                           lifetime: float | None = None) -> Checkpoint:
        """Expire the checkpoint ``lifetime`` seconds from now (``None``: never). Cost: one
        round trip and one manifest write."""
        return self._actor.refresh_checkpoint.remote(checkpoint_id, lifetime)

    @bookie_call
    def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Delete a checkpoint (``CheckpointNotFoundError`` if there is no such live one). The
        store's snapshot lease is brought up to date first, so a GC pass right after frees what
        only the checkpoint needed. Cost: one round trip, a manifest write and a lease
        write."""
        return self._actor.delete_checkpoint.remote(checkpoint_id)

    # -- the change feed and history leases --

    def listen(self, after: int = 0, *, name: str | None = None, lifetime: float = 60.0,
               values: bool = True, batch_size: int = 1000) -> Listener:
        """A live subscription to every change after SQN ``after``, in SQN order, as each is
        acknowledged (see :class:`~leveled_ray.client.listen.Listener`): iterate it with
        ``for`` or ``async for``; its position is ``.sqn``. It holds a history lease named
        ``name`` (a new name when ``None``) for ``lifetime`` seconds past each renewal.
        Raises :class:`~leveled_ray.errors.HistoryUnavailableError` (when first read) if
        compaction already dropped changes after ``after``. Cost: one long-poll round trip per
        batch of changes while it keeps up (the Bookie keeps recent ones in memory), a read of
        the Journal when it has fallen behind, and a lease write per renewal."""
        return Listener(self, after, name=name, lifetime=lifetime, values=values,
                        batch_size=batch_size)

    @bookie_call
    def set_history_lease(self, name: str, position, lifetime: float) -> HistoryLease:
        """Hold every change after SQN ``position`` from journal compaction for ``lifetime``
        seconds (creates lease ``name``, or moves it either way). A consumer that keeps its
        position elsewhere (Spark's checkpoint) names itself and moves its lease as it
        commits. Cost: one round trip and one manifest write."""
        return self._actor.set_history_lease.remote(name, position, lifetime)

    @bookie_call
    def drop_history_lease(self, name: str) -> None:
        """Let go of lease ``name`` (nothing happens if it is absent or expired). Cost: one
        round trip and one manifest write."""
        return self._actor.drop_history_lease.remote(name)

    @bookie_call(read=True)
    def list_history_leases(self) -> list[HistoryLease]:
        """The live history leases: ``HistoryLease(name, sqn, expires_at)``. Cost: one round
        trip and a read of the newest manifest."""
        return self._actor.list_history_leases.remote()

    async def backup_async(self, target_url: str, *, target_options: Options | None = None,
                           progress: bool | Callable[[int, int], None] = True) -> dict:
        """Incremental hot backup (see :mod:`leveled_ray.admin.backup`): bring the backup at
        ``target_url`` (an empty location, or an earlier backup of this store) up to every
        write acknowledged before the call, copying only the journal files it lacks; opening
        ``target_url`` restores the store. The copy runs in this process, with a progress line
        on stderr (or calls to ``progress(done, total)``; ``False``: none). Returns
        ``{"files", "copied", "bytes", "removed", "max_sqn", "version"}``. ``backup`` is its
        synchronous form. Cost: a checkpoint, then a copy of each journal file the backup
        lacks (one read and one write each) and of the manifest."""
        parse_url(target_url)
        target = ObjectStore.from_url(target_url, target_options or self.options)
        pin = await self.checkpoint_async(lifetime=self.options.gc.long_snapshot_timeout_s,
                                          name="backup")
        try:
            source = ObjectStore.from_url(self.url, self.options)
            return (await backup_version(source, self.options, pin.manifest_id, target,
                                         progress_of(progress, "backup"))).as_dict()
        finally:
            await self.delete_checkpoint_async(pin.id)

    # -- queries (see leveled_ray.read.queries): each runs on a snapshot of its own --

    def _query_view(self, needs_values: bool):
        snap = self.snapshot(long_running=True, values=needs_values)
        return snap._view, lambda: self._release_soon(snap)

    def _release_soon(self, snap: Snapshot) -> None:
        """Release a snapshot without waiting (a query's caller need not pay for it)."""
        snap._release_soon()

    async def kept_tree_async(self, size: str = DEFAULT_SIZE) -> TicTacTree | None:
        """See :meth:`Queries.kept_tree_async <leveled_ray.read.queries.Queries.kept_tree_async>`:
        the Penciller's kept tree, changed by the changes not yet in its files. Cost: one round
        trip carrying the tree (4 bytes a segment), and the Bookie's lookups of those changes'
        keys."""
        data = await self._kept_tree_bytes_async(check_size(size))
        return None if data is None else TicTacTree.decode(data)

    @bookie_call(read=True)
    def _kept_tree_bytes(self, size: str):
        return self._actor.kept_tree.remote(size)

    async def _query_view_async(self, needs_values: bool):
        snap = await self.snapshot_async(long_running=True, values=needs_values)
        return snap._view, snap.release_async

    def _check_fold(self, kind: str) -> None:
        head_only_mode.refuse_fold(self.head_only, kind)

    @two_forms(iterates=True)
    def index_query(self, bucket, field: str, start, end, *, return_terms: bool = False,
                    term_regex=None, start_key=None, max_results: int | None = None):
        """See :meth:`Queries.index_query <leveled_ray.read.queries.Queries.index_query>`. With
        ``max_results`` up to :data:`BOOKIE_QUERY_MAX` the Bookie answers in one round trip,
        on its own view pinned for the query; otherwise results stream from a snapshot. Cost:
        one round trip; past the limit, a snapshot's, then the query's reads in this
        process."""
        query = self._bookie_query(bucket, field, start, end, return_terms, term_regex,
                                   start_key, max_results)
        if query is None:
            return self._plan(self._index_query(bucket, field, start, end, return_terms,
                                                term_regex, start_key, max_results))
        return Answer(read_call(lambda: self._actor.index_query.remote(query)))

    def _bookie_query(self, bucket, field, start, end, return_terms, term_regex, start_key,
                      max_results) -> dict | None:
        """A query small enough for the Bookie to answer in one round trip, or ``None``."""
        check_index_query(field, start, end, term_regex, max_results)
        self._check_fold("index")
        if max_results is None or max_results > BOOKIE_QUERY_MAX:
            return None
        return {"bucket": bucket, "field": field, "start": start, "end": end,
                "return_terms": return_terms, "term_regex": term_regex,
                "start_key": start_key, "max_results": max_results}

    @bookie_call
    def trim_journal(self) -> str:
        """head_only stores: delete the journal files whose entries the Ledger holds now
        (it also happens on its own as the Ledger persists). ``"started"`` or ``"busy"``.
        Cost: one round trip; the deletes run in the Bookie after it answers."""
        if not self.head_only:
            raise InvalidArgumentError("trim_journal is for head_only stores: the Journal of "
                                       "this store holds its values")
        return self._actor.compact_journal.remote()

    @bookie_call(read=True)
    def stats(self) -> dict:
        """Counters of the Bookie, Inker and Penciller (SQNs, caches, files, requests). Cost:
        one round trip, and one from the Bookie to each of its other actors."""
        return self._actor.stats.remote()

    @bookie_call
    def compact_journal(self, wait: bool = False) -> str | dict:
        """Start a journal compaction now: ``"started"``, or ``"busy"`` if one is running.

        It scores journal files by the share of their entries still current, rewrites the best
        run of up to ``max_run_length`` files if it beats its target, and deletes the old files
        once no snapshot needs them. It keeps every change a history lease holds. It also runs
        every ``journal.compaction_interval_s``. With ``wait=True`` it returns once done and
        visible to reads: ``{"removed": files, "added": files, "history_sqn": SQN}``.
        Cost: one round trip; the rewrite (a read and a write of each file in the run) runs in
        the Inker's clerk.
        """
        return self._actor.compact_journal.remote(bool(wait))

    @bookie_call
    def close(self) -> None:
        """Finish writes, persist the Ledger's memory and stop the store's actors.

        A clean close means the next open replays nothing. Closing twice is harmless. Cost:
        one round trip, the writes of the Ledger's memory as SSTs, and the actors' exits.
        """
        return self._close_call(CLOSE_TRIES)

    def _close_call(self, tries: int) -> Call:
        """The close, sent again while the Bookie is lost during it (``tries`` in all): its
        actor is ended only once it has closed, or is gone."""
        return Call(self._actor.close.remote(), self._killed, closing=True,
                    again=(lambda: self._close_call(tries - 1)) if tries > 1 else None)

    def _killed(self, _result=None) -> None:
        import ray

        ray.kill(self._actor, no_restart=True)

    # -- for operators and tests --

    def actors(self) -> list:
        """Ray handles of the Bookie and of its clerks that run (to inspect them, or kill them);
        the Inker and the Penciller live in the Bookie's process. Cost: one round trip."""
        return [self._actor, *_get(self._actor.actor_handles.remote())]

