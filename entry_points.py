"""The package's entry points, for both layouts, a plain store or a sharded one: ``lr.open``,
``lr.connect``, ``lr.reader``, ``lr.admin``, ``lr.clone``, ``lr.compare``, ``lr.gc`` and
``lr.destroy``. Each finds which layout is at the URL (its shard map, or none) and returns the
matching handle; no other module opens a store by its URL. Bad input (a URL that is not a
store URL, a NUL byte in it included) raises ``InvalidArgumentError`` and creates nothing."""

from __future__ import annotations

from typing import overload

from .actors.remote import NAMESPACE
from .admin import gc as garbage_collection
from .admin.compare import Comparison, compare_views
from .admin.handle import Admin
from .client import actor_names, bookies
from .client import reader as plain_reader
from .client import store as plain
from .client.ray_connection import ensure_ray
from .clock import Clock
from .cluster import placement
from .cluster.admin import ShardedAdmin
from .cluster.backup import find_shard_map
from .cluster.clone import create_any_clone, revert
from .cluster.layout import is_shard_name, resolve_layout, shard_name
from .cluster.reader import ShardedReader, open_reader
from .cluster.store import ShardedStore
from .codec.tictac import DEFAULT_SIZE
from .errors import InvalidArgumentError
from .files.store import ObjectStore
from .files.store_config import StoreConfig
from .files.sync import run_sync
from .manifest.shard_map import ShardMap
from .options import Options

_STORE_OVERRIDE = InvalidArgumentError(
    "store= overrides the client of a plain store; a sharded store builds one client per "
    "shard from its URL")


@overload
def open(url: str, options: Options | None = None, *, shards: int,
         route_by: str | None = None, name: str | None = None, detached: bool = False,
         store: None = None, head_only: str | None = None,
         clock: Clock | None = None) -> ShardedStore: ...


@overload
def open(url: str, options: Options | None = None, *, shards: None = None,
         route_by: str | None = None, name: str | None = None, detached: bool = False,
         store: ObjectStore | None = None, head_only: str | None = None,
         clock: Clock | None = None) -> plain.Store | ShardedStore: ...


def open(url: str, options: Options | None = None, *, shards: int | None = None,
         route_by: str | None = None, name: str | None = None, detached: bool = False,
         store: ObjectStore | None = None, head_only: str | None = None,
         clock: Clock | None = None) -> plain.Store | ShardedStore:
    """Open (or create) the store at ``url`` for writing, with its actors on Ray.

    ``url`` is ``memory://name``, ``file:///path`` or ``s3://bucket/prefix``. ``name`` makes
    the actors named (``name``, ``name.pclerk``, ...) in namespace ``leveled`` so other
    drivers can :func:`connect`; ``detached=True`` keeps them alive after this driver exits.
    Opening fences any other writer of the same store (its later writes fail with
    ``FencedError``). ``store`` overrides the object store client built from ``url`` (for
    example a fault-injecting wrapper). ``head_only`` (``"with_lookup"`` or ``"no_lookup"``)
    creates or opens a store that keeps small values in the Ledger (see
    :mod:`leveled_ray.codec.head_only`); a store is always opened in the mode it was created
    with. ``clock`` (default: wall time) is the time every part of the store reads: TTL
    expiry, snapshot, checkpoint and lease expiry, object ages (see :mod:`leveled_ray.clock`).

    ``shards=N`` (a power of two from 1 to 256) creates a sharded store of N shards, or
    reopens one; a sharded store is reopened as such without it (the count is stored).
    ``route_by="bucket"`` keeps each bucket in one shard (default ``"key"``). The shards'
    Bookies are spread over the Ray cluster's nodes, one placement-group bundle each, and a
    shard's other actors run on its node. ``store`` (a client override) applies to a plain
    store only. Bad input raises ``InvalidArgumentError`` and creates nothing.

    Cost: one Ray actor per store (per shard), about a second or two, as it starts a Python
    process; its clerks start later, with their first work; plus the replay of journal
    entries not yet in the Ledger."""
    options, clock, config = bookies.check_open(url, options, name, detached, head_only, clock)
    ensure_ray()
    bookies.refuse_running(name, *([] if name is None else _running_shards(name)))
    if store is not None and shards is not None:
        raise _STORE_OVERRIDE
    root = ObjectStore(config) if store is None else store
    shard_map = run_sync(resolve_layout(root, shards, route_by, options))
    if shard_map is None:
        (opened,) = bookies.start_bookies([bookies.BookieSpec(url, name, root)], options,
                                        detached=detached, head_only=head_only, clock=clock)
        return opened
    if store is not None:
        raise _STORE_OVERRIDE
    return _open_shards(config, shard_map, options, name, detached, head_only, clock)


def _open_shards(config: StoreConfig, shard_map: ShardMap, options: Options, name: str | None,
                 detached: bool, head_only: str | None, clock: Clock) -> ShardedStore:
    if name is not None:  # none runs (refuse_running): what a crashed one moved is stale
        for prefix in shard_map.prefixes:
            actor_names.forget(shard_name(name, prefix))
    group = placement.spread(shard_map.count, name, detached)
    try:
        specs = [bookies.BookieSpec(shard.url, None if name is None else shard_name(name, prefix),
                                    ObjectStore(shard), scheduling=placement.bundle(group, s),
                                    shard=(name or config.url, shard_map.labels[s]))
                 for s, prefix in enumerate(shard_map.prefixes)
                 for shard in [config.under(prefix)]]
        stores = bookies.start_bookies(specs, options, detached=detached, head_only=head_only,
                                     clock=clock)
    except BaseException:
        placement.remove(group)
        raise
    return ShardedStore(stores, shard_map, config.url, name, options, clock, group, detached)


def _running_shards(name: str) -> list[str]:
    """The names of the running Bookies of the shards of the store named ``name``."""
    from ray.util import list_named_actors

    return sorted(actor["name"] for actor in list_named_actors(all_namespaces=True)
                  if actor["namespace"] == NAMESPACE and is_shard_name(name, actor["name"]))


def connect(name: str, *, address: str | None = None) -> plain.Store | ShardedStore:
    """A handle on a running store opened with ``name``, plain or sharded, from any driver.

    ``address`` joins that Ray cluster first (else ``RAY_ADDRESS``, else this process's, else
    the one running on this machine; none is ever started): ``"ray://host:10001"`` reaches a
    cluster's Ray Client server from a remote app, with token authentication set up from
    this machine's token (see :func:`~leveled_ray.client.ray_connection.ensure_ray`). Cost: a
    few round trips."""
    ensure_ray(address, join=True)  # a store that runs is on a cluster that runs
    import ray

    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        running = _running_shards(name)
        if not running:
            raise InvalidArgumentError(f"no running store named {name!r}") from None
        return _connect_shards(name, running[0])
    return bookies.connect_bookie(name)


def _connect_shards(name: str, one_shard: str) -> ShardedStore:
    first = bookies.connect_bookie(one_shard)
    url = first.url.rsplit("/", 1)[0]
    shard_map = run_sync(find_shard_map(ObjectStore.from_url(url, first.options),
                                        first.options))
    if shard_map is None:
        raise InvalidArgumentError(f"the store named {name!r} has no shard map at {url}")
    stores = [bookies.connect_bookie(shard_name(name, prefix)) for prefix in shard_map.prefixes]
    return ShardedStore(stores, shard_map, url, name, first.options, first.clock)


def clone(parent_url: str, url: str, checkpoint: str | None = None, *,
          options: Options | None = None, parent_options: Options | None = None,
          name: str | None = None, at_sqn=None, at_time: float | None = None):
    """Create the clone at ``url`` of the store at ``parent_url`` (as of the checkpoint
    ``checkpoint``, or of now) and open it for writing; returns its store handle, sharded
    like its parent. Safe to retry: an interrupted clone is finished, a finished one is just
    opened. A sharded parent that is being written is cloned from a checkpoint taken through
    it: ``lr.clone(parent_url, url, store.checkpoint().id)``.

    ``at_sqn`` (a position on a sharded store) or ``at_time`` make the clone hold the store
    as it was then, within the history its Journal keeps: the clone is made, then every
    object changed since is written back as it was (see
    :func:`~leveled_ray.cluster.clone.revert`). Cost: the copy of one manifest per shard
    (the clone reads its parent's files where they are), and an open."""
    options = options or Options()
    run_sync(create_any_clone(parent_url, url, checkpoint, options, parent_options))
    store = open(url, options, name=name)
    if at_sqn is not None or at_time is not None:
        try:
            revert(store, at_sqn, at_time)
        except BaseException:
            store.close()
            raise
    return store


def admin(url: str, options: Options | None = None, *,
          clock: Clock | None = None) -> Admin | ShardedAdmin:
    """Administration of the store at ``url``, running or not, without Ray: an
    :class:`~leveled_ray.admin.handle.Admin`, or for a sharded store a
    :class:`~leveled_ray.cluster.admin.ShardedAdmin` over its shards. ``clock`` is the time
    its checkpoints, GC and destroy read (default: wall time). Cost: a list and a read of the
    newest manifest (or the shard map)."""
    options = options or Options()
    shard_map = run_sync(find_shard_map(ObjectStore.from_url(url, options), options))
    if shard_map is None:
        return Admin(url, options, clock)
    return ShardedAdmin(url, shard_map, options, clock)


def reader(url: str, checkpoint: str | None = None, *, options: Options | None = None,
           lifetime: float = 600.0, clock: Clock | None = None, at_sqn=None,
           at_time: float | None = None) -> plain_reader.Reader | ShardedReader:
    """A read-only handle on the store at ``url`` from any process, without Ray: at the given
    checkpoint, or at one of its own that it pins for ``lifetime`` seconds and renews while in
    use. ``clock`` is the time it reads (TTL expiry, its checkpoint's; default: wall time).
    ``at_sqn`` / ``at_time`` read the store as it was then (see :meth:`Store.snapshot
    <leveled_ray.client.store.Store.snapshot>`), within the history its Journal keeps. On a
    sharded store it reads every shard's part of the checkpoint (see
    :mod:`leveled_ray.cluster.reader`), and ``at_sqn`` is a position ``{"0": sqn, ...}``.
    Cost: the reads of one manifest version per shard; key reads then go straight to the
    object store."""
    found = admin(url, options, clock=clock)
    if isinstance(found, ShardedAdmin):
        return run_sync(open_reader(found, checkpoint, lifetime, at_sqn, at_time))
    return plain_reader.open_plain_reader(url, checkpoint, options=options, lifetime=lifetime,
                                          clock=clock, at_sqn=at_sqn, at_time=at_time)


def compare(a, b, *, bucket=None, start_key=None, end_key=None, size: str = DEFAULT_SIZE,
            max_segments: int = 256, options: Options | None = None) -> Comparison:
    """The keys that differ between two stores, found by exchanging tictac trees (leveled's
    anti-entropy; see :mod:`leveled_ray.admin.compare`): a
    :class:`~leveled_ray.admin.compare.Comparison` with each differing key marked
    ``missing_in_a``, ``missing_in_b`` or ``different`` (another value), the rounds of the
    exchange and the bytes it moved.

    ``a`` and ``b`` are store URLs, read at rest without Ray through a :func:`reader` each
    (plain or sharded, a backup's or a clone's URL too), or handles of any kind with folds: a
    running store, a snapshot, a reader (at a checkpoint, or at a past time). Objects are
    compared by key and value (their hash); deleted and expired objects are absent. ``size``
    picks the trees' shape (``"xxsmall"`` to ``"large"``); ``max_segments`` bounds the
    segments compared per round. ``bucket`` (and within it ``start_key`` to ``end_key``, both
    included, as :meth:`~leveled_ray.Store.fold_keys` takes them) compares only that range:
    leveled's range trees. Bad input raises ``InvalidArgumentError``. Cost: each side's
    kept tree (see ``ledger.tree_size``; a side without one, or a range compare, folds its
    heads, no values), then a fold of the blocks that may hold the dirty segments' keys; the
    exchange itself moves a root, the dirty branches and the dirty segments' keys."""
    opened = []
    for side in (a, b):  # both checked before either is pinned by a reader
        if isinstance(side, str):
            admin(side, options).list_checkpoints()  # InvalidArgumentError if no store
        elif not hasattr(side, "fold_heads_batches_async"):
            raise InvalidArgumentError(f"compare takes store URLs or store handles, not "
                                       f"{side!r}")

    def view(side):
        if isinstance(side, str):
            opened.append(reader(side, options=options))
            return opened[-1]
        return side

    try:
        return run_sync(compare_views(view(a), view(b), size=size, max_segments=max_segments,
                                      bucket=bucket, start=start_key, end=end_key))
    finally:
        for opened_reader in opened:
            opened_reader.close()


def gc(url: str, min_age: float | None = None, *, dry_run: bool = False,
       options: Options | None = None, progress=None,
       clock: Clock | None = None) -> garbage_collection.Plan:
    """One garbage-collection pass on the store at ``url`` (running or not): deletes what no
    manifest, checkpoint, clone or snapshot can read and is older than ``min_age`` seconds
    (default ``Options.gc.min_age_s``). A running writer's uploads (flushes, merges,
    compactions, bulk writes begun through it) and a bulk write's commit records are kept
    while they may still be published, whatever ``min_age``; a bulk write at rest is the
    caller's to finish before a pass whose ``min_age`` is shorter than it. On a sharded store,
    every shard's pass and the root's. Cost: a listing of the store's objects and a read of
    every live manifest."""
    return admin(url, options, clock=clock).gc(min_age, dry_run, progress)


def destroy(url: str, soft: bool = True, *, options: Options | None = None) -> int:
    """Destroy the store at ``url``. ``soft`` marks it destroyed and fences its writer; GC then
    deletes everything after a grace period (``gc.min_age_s``) once no checkpoint is left.
    ``soft=False`` deletes everything now, and refuses while live checkpoints exist. On a
    sharded store, every shard, then (``soft=False``) its root. Cost: one manifest write per
    shard; with ``soft=False``, a GC pass that deletes every object."""
    return admin(url, options).destroy(soft)
