"""The handle of a sharded store: the plain store's API over N shards.

Each key goes to its shard's Bookie directly (one actor hop, as on a plain store); batched
reads go to every shard involved at once and answer in input order; folds and index queries
merge the shards' streams in key order (:class:`~leveled_ray.read.merged.MergedView`).
A ``put_many`` within one shard is that shard's ``put_many``; across shards it commits
atomically (:mod:`.txn`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import NamedTuple

from .. import roles, roles_admin
from ..client.shard_side import ShardSide
from ..client.store import Store
from ..clock import Clock
from ..codec import Delete, Head, Put, checked_key, range_check
from ..codec import head_only as head_only_mode
from ..codec.routing import shards_of
from ..codec.tictac import DEFAULT_SIZE, TicTacTree, check_size
from ..errors import (
    ConflictError,
    ObjectStoreError,
    StoreClosedError,
    WrongShardError,
)
from ..files.store import ObjectStore
from ..files.sync import run_sync, two_forms, with_sync_twins
from ..manifest.model import Checkpoint
from ..manifest.shard_map import ShardMap
from ..options import Options
from ..read.changes import shard_positions
from ..read.history_view import check_moment
from ..read.kept_trees import merged
from ..read.merged import MergedView
from ..read.queries import Queries
from . import checkpoints, placement, reshape
from .admin import earlier_layouts
from .backup import backup
from .cut import Early, cut
from .fanout import per_shard_checked, shard_groups
from .layout import shard_name
from .listen import ShardedListener
from .redirect import CHANGE_WAIT_S, REDIRECTS, Layout, followed, wait_for_layout
from .runtime import RAY, Runtime
from .snapshot import ShardedSnapshot
from .totals import totals
from .txn import ShardedTransactions, put_across


def _sides(stores) -> list[ShardSide]:
    return [ShardSide(store) for store in stores]


class KeyCall(NamedTuple):
    """The plan of a call by one key (see :func:`~leveled_ray.files.sync.two_forms`): the
    plain handle's ``method`` on the key's shard, sent again on the new layout if the layout
    changed under it (:meth:`ShardedStore._routed`). The synchronous form calls the shard's
    synchronous method, which waits for its Ray call directly."""

    handle: ShardedStore
    method: str
    args: tuple
    kwargs: dict

    def _on(self, layout: Layout):
        return self.handle._on(layout, *self.args[:2])

    def run(self):
        return self.handle._routed_sync(
            lambda layout: getattr(self._on(layout), self.method)(*self.args, **self.kwargs))

    async def run_async(self):
        return await self.handle._routed(lambda layout: getattr(
            self._on(layout), f"{self.method}_async")(*self.args, **self.kwargs))


@with_sync_twins
class ShardedStore(checkpoints.CheckpointsOfShards, Queries, ShardedTransactions,
                   roles.KeyReads,
                   roles.Queries, roles.History, roles.Writes, roles.PointsInTime,
                   roles.Transactions, roles.Checkpoints,
                   roles.HistoryLeases, roles.Maintenance, roles.Backups, roles_admin.Splits,
                   roles_admin.Moves):
    """A handle on an open sharded store. Picklable: pass it to Ray tasks.

    Example::

        store = lr.open("s3://bkt/db", shards=8, name="orders")
        store.put("users", "alice", b"v1")        # one hop, to alice's shard
        store.get_many([("users", "alice"), ("users", "bob")])
    """

    def __init__(self, stores: Sequence[Store], shard_map: ShardMap, url: str,
                 name: str | None, options: Options, clock: Clock, group=None,
                 detached: bool = False, runtime: Runtime = RAY):
        self._layout = Layout(tuple(stores), shard_map)
        self.url = url
        self.name = name
        self.options = options
        self.clock = clock
        self.detached = detached
        self.head_only = self._stores[0].head_only
        self._group = group  # the placement group this handle made (None in copies)
        self._change: concurrent.futures.Future | None = None  # a split or move under way
        self._shard_groups: dict = {}  # prefix -> the placement group of a shard it moved
        self.runtime = runtime  # where its Bookies run: Ray's (a copy's is always Ray's)

    def __reduce__(self):
        return (ShardedStore, (self._stores, self.shard_map, self.url, self.name, self.options,
                               self.clock, None, self.detached))

    def __repr__(self) -> str:
        return f"ShardedStore({self.url!r}, shards={self.shards}, name={self.name!r})"

    def __enter__(self) -> ShardedStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- routing --

    @property
    def shard_map(self) -> ShardMap:
        """The layout this handle sends calls by (it follows a split: see :mod:`.redirect`)."""
        return self._layout.shard_map

    @property
    def _stores(self) -> tuple[Store, ...]:
        return self._layout.stores

    @property
    def shards(self) -> int:
        """The number of shards."""
        return self.shard_map.count

    def shard_of(self, bucket, key) -> int:
        """The shard that holds ``(bucket, key)``: a pure function of the key (see
        :mod:`leveled_ray.codec.routing`). Cost: a hash of the key, no I/O."""
        return self.shard_map.shard_of(checked_key(bucket, key, self.options))

    def shard(self, index: int) -> Store:
        """The plain handle of shard ``index`` (operators and tests). Cost: none."""
        return self._stores[index]

    def _on(self, layout: Layout, bucket, key) -> Store:
        return layout.stores[layout.shard_map.shard_of(checked_key(bucket, key, self.options))]

    def _routed_sync(self, call: Callable[[Layout], object]):
        """``call(layout)`` on the current layout, sent again on the new one when the layout
        changed under it (see :mod:`.redirect`)."""
        for _ in range(REDIRECTS):
            layout = self._layout
            try:
                return call(layout)
            except (WrongShardError, StoreClosedError) as exc:
                if not followed(exc) or not run_sync(self._follow(layout)):
                    raise
        return call(self._layout)

    async def _routed(self, call: Callable[[Layout], Awaitable]):
        """:meth:`_routed_sync`'s async form."""
        for _ in range(REDIRECTS):
            layout = self._layout
            try:
                return await call(layout)
            except (WrongShardError, StoreClosedError) as exc:
                if not followed(exc) or not await self._follow(layout):
                    raise
        return await call(self._layout)

    async def _follow(self, used: Layout) -> bool:
        """Whether the layout moved on from ``used``: after a split or move this handle runs
        (waited for), or one found running (see :func:`~.redirect.find_layout`)."""
        change = self._change
        if change is not None:
            with contextlib.suppress(Exception):  # its own caller sees its error
                await asyncio.wait_for(asyncio.wrap_future(change), CHANGE_WAIT_S)
        if self._layout is not used:
            return True
        try:
            found = await wait_for_layout(self.url, self.name, self.options, used, self.clock,
                                          self.runtime)
        except ObjectStoreError:  # the layout cannot be read now: the call's own error stands
            return False
        if found is None:
            return False
        self._layout = found
        return True

    def _key_call(self, method: str, bucket, key, *args, **kwargs) -> KeyCall:
        return KeyCall(self, method, (bucket, key, *args), kwargs)

    # -- one key: its shard's call, nothing more --

    @two_forms
    def put(self, bucket, key, value: bytes, *, indexes=(), ttl: float | None = None,
            metadata: dict | None = None, if_sqn: int | None = None,
            if_absent: bool = False) -> int:
        """:meth:`Store.put <leveled_ray.client.store.Store.put>` on the key's shard; the SQN
        is that shard's. Cost: the plain call's, on that shard (as for every call by one key:
        ``delete``, ``get``, ``head``)."""
        return self._key_call("put", bucket, key, value, indexes=indexes, ttl=ttl,
                              metadata=metadata, if_sqn=if_sqn, if_absent=if_absent)

    @two_forms
    def delete(self, bucket, key, *, indexes=(), if_sqn: int | None = None) -> int:
        """:meth:`Store.delete <leveled_ray.client.store.Store.delete>` on the key's shard.
        Cost: the plain call's, on that shard."""
        return self._key_call("delete", bucket, key, indexes=indexes, if_sqn=if_sqn)

    @two_forms
    def get(self, bucket, key) -> bytes | None:
        """:meth:`Store.get <leveled_ray.client.store.Store.get>` on the key's shard. Cost:
        the plain call's, on that shard."""
        return self._key_call("get", bucket, key)

    @two_forms
    def head(self, bucket, key) -> Head | None:
        """:meth:`Store.head <leveled_ray.client.store.Store.head>` on the key's shard. Cost:
        the plain call's, on that shard."""
        return self._key_call("head", bucket, key)

    # -- many keys: every shard involved at once, answers in input order --

    async def _many(self, pairs, what: str, read) -> list:
        head_only_mode.refuse(self.head_only, what)
        pairs = list(pairs)
        return await self._routed(lambda layout: per_shard_checked(
            _sides(layout.stores), pairs, self.options, layout.shard_map, read))

    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """Values of many ``(bucket, key)`` pairs, ``None`` where absent: one call to each
        shard involved, all at once. A cross-shard ``put_many`` is in the answer whole or not
        at all: a shard read before a batch it holds part of could be visible is read again
        (see :func:`~.fanout.stale_shards`). Cost: the plain call's on each shard involved, at
        once, and rarely a second round on a shard read too early."""
        return await self._many(pairs, "get", ShardSide.get_many_checked)

    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """Heads of many ``(bucket, key)`` pairs, as :meth:`get_many_async` reads values. Cost:
        :meth:`get_many_async`'s, without the values."""
        return await self._many(pairs, "head", ShardSide.head_many_checked)

    async def put_many_async(self, items: Iterable[Put | Delete]) -> list[int]:
        """Write many changes atomically; returns each item's SQN (its shard's).

        The batch is checked once, here. Within one shard it is that shard's ``put_many``.
        Across shards every item becomes visible or none does, and all conditions are checked
        before any item is visible (see :mod:`.txn`). Cost: within one shard, the plain
        call's; across shards, a prepare on each (a journal write each), one commit record
        on the root, and each shard's apply."""
        changes, values = ShardSide(self._stores[0]).checked_changes(items)  # all check alike
        if not changes:
            return []
        return await self._write_changes(changes, values)

    async def _write_changes(self, changes: list, values: list, ranges: list = (),
                             busy_is_conflict: bool = False) -> list[int]:
        async def put(layout: Layout) -> list[int]:
            groups: dict = shard_groups([c.lkey for c in changes], layout.shard_map)
            every, every_values = changes, values
            if ranges:  # every shard checks its own keys of each range, after its changes
                groups = {s: list(groups.get(s, ())) for s in range(len(layout.stores))}
                every, every_values = list(changes), list(values)
                for lo, hi, found, kind, owners in ranges:
                    shards = shards_of(owners, layout.shard_map.runs, layout.shard_map.route_by)
                    for s in groups:
                        groups[s].append(len(every))
                        every.append(range_check(
                            lo, hi, [p for p, at in zip(found, shards) if at == s], kind))
                        every_values.append(None)
            if len(groups) == 1:
                (shard,) = groups
                return await ShardSide(layout.stores[shard]).put_changes(every, every_values)
            return await put_across(self, layout, every, every_values, groups,
                                    busy_is_conflict)
        return await self._routed(put)

    # -- points in time --

    async def snapshot_async(self, long_running: bool = False, *, values: bool = True,
                             timeout_s: float | None = None, at_sqn=None,
                             at_time: float | None = None) -> ShardedSnapshot:
        """A snapshot of every shard at one consistent cut (see :mod:`.cut`): it holds every
        write acknowledged before the call, and of two writes where the first was
        acknowledged before the second was sent, never the second without the first; of a
        cross-shard ``put_many``, all or nothing. ``at_sqn`` (a position ``{"0": sqn, ...}``)
        gives every shard as it was then (see :meth:`Store.snapshot`); ``at_time`` gives each
        shard as it was then, less the cross-shard batches not applied by then on every
        shard they span (see :mod:`.past`): such a batch is still all or nothing. Cost: a cut
        (a freeze, a snapshot and a thaw on every shard, at once; writes wait meanwhile), and
        for ``at_sqn``/``at_time`` the plain call's reads of history on each shard."""
        check_moment(at_sqn, at_time)
        early = Early(("snapshot", long_running, values, timeout_s),
                      lambda _, snap: snap.release_async())
        taken, _ = await cut(self, self._sides(), lambda s: self._stores[s].snapshot_async(
            long_running, values=values, timeout_s=timeout_s), early)
        snap = ShardedSnapshot(taken, self.shard_map, self.options)
        if at_sqn is None and at_time is None:
            return snap
        try:
            await snap.go_back_async(at_sqn, at_time)
        except BaseException:
            await snap.release_async()
            raise
        return snap

    async def _cut(self, take, early: Early | None = None):
        return await cut(self, self._sides(), take, early)

    def _sides(self) -> list[ShardSide]:
        return _sides(self._stores)

    async def _checkpoint_part(self, shard: int, lifetime, name, source, checkpoint_id):
        return await self._stores[shard].checkpoint_async(lifetime, name, source,
                                                           checkpoint_id=checkpoint_id)

    async def checkpoint_async(self, lifetime: float | None = None, name: str | None = None,
                               source: str | None = None, *,
                               checkpoint_id: str | None = None) -> Checkpoint:
        """A durable checkpoint of every shard at one consistent cut, with one id (see
        :mod:`.checkpoints`; ``checkpoint_id`` or a new one); its ``manifest_id`` is -1, as
        each shard pins its own version. Cost: a cut (a freeze, a take and a thaw on every
        shard, at once; writes wait meanwhile) and the plain call's on each shard."""
        return (await checkpoints.create(self, lifetime, name, source, checkpoint_id))[0]

    async def backup_async(self, target_url: str, *, target_options: Options | None = None,
                           progress: bool | Callable[[int, int], None] = True) -> dict:
        """Incremental hot backup of every shard, at one consistent cut, to ``target_url``
        (the same layout: a shard map and one prefix per shard); opening ``target_url``
        restores the store. Returns the totals, and ``shards``: each shard's result. Cost: a
        checkpoint, then the plain backup's copies of every shard."""
        return await backup(self, target_url, target_options, progress)

    def _query_view(self, needs_values: bool):
        snap = self.snapshot(long_running=True, values=needs_values)

        def release():
            for store, part in zip(self._stores, snap.parts):
                store._release_soon(part)
        return MergedView([s._view for s in snap.parts]), release

    async def _query_view_async(self, needs_values: bool):
        snap = await self.snapshot_async(long_running=True, values=needs_values)
        return MergedView([s._view for s in snap.parts]), snap.release_async

    def _check_fold(self, kind: str) -> None:
        head_only_mode.refuse_fold(self.head_only, kind)

    # -- the whole store --

    async def _earlier_layouts_async(self) -> list:
        """An admin over each earlier shard map, newest first (see :mod:`.checkpoints`)."""
        return await earlier_layouts(ObjectStore.from_url(self.url, self.options), self.url,
                                     self.shard_map, self.options, self.clock)

    async def stats_async(self) -> dict:
        """Totals of every shard's counters, and ``shards``: each shard's own stats. Cost: the plain
        call's on each shard, all at once."""
        parts = await asyncio.gather(*(store.stats_async() for store in self._stores))
        return {**totals(parts), "url": self.url, "name": self.name,
                "route_by": self.shard_map.route_by, "shards": list(parts)}

    async def kept_tree_async(self, size: str = DEFAULT_SIZE) -> TicTacTree | None:
        """The XOR merge of every shard's :meth:`Store.kept_tree_async` (the shards hold
        disjoint keys), or ``None`` if a shard has none. Cost: the plain call's on each shard,
        all at once."""
        check_size(size)
        return merged(list(await asyncio.gather(*(s.kept_tree_async(size)
                                                  for s in self._stores))))

    async def compact_journal_async(self, wait: bool = False) -> list:
        """Start a journal compaction on every shard: each shard's ``"started"`` or
        ``"busy"`` (with ``wait``, each shard's result: see :meth:`Store.compact_journal`).
        Cost: the plain call's on each shard, all at once."""
        return list(await asyncio.gather(*(s.compact_journal_async(wait)
                                           for s in self._stores)))

    async def trim_journal_async(self) -> list:
        """head_only stores: :meth:`Store.trim_journal` on every shard (each shard's
        ``"started"`` or ``"busy"``). Cost: the plain call's on each shard, all at once."""
        return list(await asyncio.gather(*(s.trim_journal_async() for s in self._stores)))

    # -- the change feed and history leases --

    def listen(self, after=0, *, name: str | None = None, lifetime: float = 60.0,
               values: bool = True, batch_size: int = 1000) -> ShardedListener:
        """Every shard's changes after position ``after`` (``{"0": sqn, ...}``, or ``0``), as
        each is acknowledged (see :mod:`leveled_ray.cluster.listen`); ``.sqn`` is the
        position. Each shard's listener holds a lease ``<name>.<shard>``. Cost: a plain
        listener's on each shard."""
        return ShardedListener(self, after, name=name, lifetime=lifetime, values=values,
                               batch_size=batch_size)

    async def set_history_lease_async(self, name: str, position, lifetime: float) -> list:
        """Hold every change after ``position`` (``{"0": sqn, ...}``) on every shard, as lease
        ``name`` of each (see :meth:`Store.set_history_lease`). Cost: the plain call's on each
        shard, all at once."""
        sqns = shard_positions(position, self.shard_map.labels, "position")
        return list(await asyncio.gather(*(store.set_history_lease_async(name, sqn, lifetime)
                                           for store, sqn in zip(self._stores, sqns))))

    async def drop_history_lease_async(self, name: str) -> None:
        """Let go of lease ``name`` on every shard. Cost: the plain call's on each shard, all at
        once."""
        await asyncio.gather(*(store.drop_history_lease_async(name) for store in self._stores))

    async def list_history_leases_async(self) -> dict[str, dict[str, int]]:
        """Each live lease's position: ``{name: {"0": sqn, ...}}`` (shards where a lease
        is missing or expired are left out of its position). Cost: the plain call's on each shard,
        all at once."""
        found: dict[str, dict[str, int]] = {}
        for shard, leases in enumerate(await asyncio.gather(
                *(store.list_history_leases_async() for store in self._stores))):
            for lease in leases:
                found.setdefault(lease.name, {})[self.shard_map.labels[shard]] = lease.sqn
        return found

    async def close_async(self) -> None:
        """Close every shard (each as :meth:`Store.close`), then free their placement.
        Cost: the plain call's on each shard, all at once."""
        try:
            await asyncio.gather(*(store.close_async() for store in self._stores))
        finally:
            group, self._group = self._group, None
            runtime = self.runtime
            runtime.remove(group if group is not None else runtime.named(
                None if self.name is None else placement.placement_name(self.name)))
            for prefix in self.shard_map.prefixes:
                reshape.drop_group(self, prefix)
                if self.name is not None:
                    runtime.forget(shard_name(self.name, prefix))

    # -- the layout: split and move shards through the running store --

    async def split_shard_async(self, shard: int) -> ShardMap:
        """Split shard ``shard`` in two, by reference (see :mod:`.split` and
        :mod:`.reshape`); returns the new shard map. The shard's writes pause meanwhile (this
        handle's calls wait and go on; other handles follow the new layout by themselves,
        see :mod:`.redirect`); other shards are untouched. The children's processes start
        before the pause. Cost: two processes started, the shard's close, the split (a
        manifest per child), and the children's opens."""
        return await reshape.split_running(self, shard)

    async def move_shard_async(self, shard: int, node_id: str) -> None:
        """Restart shard ``shard``'s Bookie on the Ray node ``node_id`` (a hex id, as in
        ``stats()``): the new Bookie's process starts first, then the shard's writes pause
        for its close and the new one's open (see :mod:`.reshape`). Cost: a process started,
        the shard's close and open."""
        await reshape.move_running(self, shard, node_id)

    async def rebalance_async(self) -> list[dict]:
        """Move shards until the nodes alive now run as many each as can be (at most one
        apart); returns the moves made (``shard`` label, ``from`` and ``to`` node). Cost: a
        :meth:`move_shard` per move, one after the other."""
        return await reshape.rebalance(self)

    @contextlib.contextmanager
    def _changing(self):
        """While a split or move of this handle runs: calls that meet its closed shard wait
        for it, then follow the new layout."""
        if self._change is not None:
            raise ConflictError("a split or move runs through this handle already")
        self._change = concurrent.futures.Future()
        try:
            yield
        finally:
            change, self._change = self._change, None
            change.set_result(None)

    def actors(self) -> list:
        """Every shard's Ray actors (Bookie and Penciller), shard by shard. Cost: one round
        trip per shard."""
        return [actor for store in self._stores for actor in store.actors()]
