"""The package's entry points for both layouts, a plain store or a sharded one: ``lr.open``,
``lr.connect``, ``lr.admin``, ``lr.reader``, ``lr.gc`` and ``lr.destroy`` find which one is at
the URL (its shard map, or none) and return the matching handle."""

from __future__ import annotations

from ..admin import gc as garbage_collection
from ..admin.handle import Admin
from ..client import reader as plain_reader
from ..client import store as plain
from ..client.ray_connection import ensure_ray
from ..clock import Clock
from ..errors import InvalidArgumentError
from ..files.store import ObjectStore
from ..files.sync import run_blocking
from ..manifest.shard_map import ShardMap, read_shard_map
from ..options import Options
from . import placement
from .admin import ShardedAdmin
from .backup import find_shard_map
from .layout import resolve_layout
from .reader import ShardedReader, open_reader
from .store import ShardedStore

_STORE_OVERRIDE = InvalidArgumentError(
    "store= overrides the client of a plain store; a sharded store builds one client per "
    "shard from its URL")


def shard_name(name: str, shard: int) -> str:
    """The actor name of shard ``shard``'s Bookie in a store named ``name``."""
    return f"{name}.shard-{shard:03d}"


def open(url: str, options: Options | None = None, *, shards: int | None = None,
         route_by: str | None = None, name: str | None = None, detached: bool = False,
         store: ObjectStore | None = None, head_only: str | None = None,
         clock: Clock | None = None) -> plain.Store | ShardedStore:
    """Open (or create) the store at ``url`` for writing; see :func:`leveled_ray.client.store.open`
    for the arguments a plain store takes.

    ``shards=N`` (a power of two from 1 to 256) creates a sharded store of N shards, or
    reopens one; a sharded store is reopened as such without it (the count is stored).
    ``route_by="bucket"`` keeps each bucket in one shard (default ``"key"``). The shards'
    Bookies are spread over the Ray cluster's nodes, one placement-group bundle each, and a
    shard's other actors run on its node. ``store`` (a client override) applies to a plain
    store only. Bad input raises ``InvalidArgumentError`` and creates nothing."""
    options, clock = plain.check_open(url, options, name, detached, head_only, clock)
    ensure_ray()
    plain.refuse_running(name, None if name is None else shard_name(name, 0))
    if store is not None and shards is not None:
        raise _STORE_OVERRIDE
    root = ObjectStore.from_url(url, options) if store is None else store
    shard_map = run_blocking(resolve_layout(root, shards, route_by, options))
    if shard_map is None:
        (opened,) = plain.start_bookies([plain.BookieSpec(url, name, store)], options,
                                        detached=detached, head_only=head_only, clock=clock)
        return opened
    if store is not None:
        raise _STORE_OVERRIDE
    return _open_shards(url, shard_map, options, name, detached, head_only, clock)


def _open_shards(url: str, shard_map: ShardMap, options: Options, name: str | None,
                 detached: bool, head_only: str | None, clock: Clock) -> ShardedStore:
    group = placement.spread(shard_map.count, name, detached)
    try:
        specs = [plain.BookieSpec(shard_map.shard_url(url, s),
                                  None if name is None else shard_name(name, s),
                                  scheduling=placement.bundle(group, s), shard=(name or url, s))
                 for s in range(shard_map.count)]
        stores = plain.start_bookies(specs, options, detached=detached, head_only=head_only,
                                     clock=clock)
    except BaseException:
        placement.remove(group)
        raise
    return ShardedStore(stores, shard_map, url, name, options, clock, group)


def connect(name: str, *, address: str | None = None) -> plain.Store | ShardedStore:
    """A handle on a running store opened with ``name``, plain or sharded, from any driver
    (see :func:`leveled_ray.client.store.connect` for ``address``)."""
    ensure_ray(address, join=True)  # a store that runs is on a cluster that runs
    import ray

    try:
        ray.get_actor(name, namespace=plain.NAMESPACE)
    except ValueError:
        try:
            ray.get_actor(shard_name(name, 0), namespace=plain.NAMESPACE)
        except ValueError:
            raise InvalidArgumentError(f"no running store named {name!r}") from None
        return _connect_shards(name)
    return plain.connect(name)


def _connect_shards(name: str) -> ShardedStore:
    first = plain.connect(shard_name(name, 0))
    url = first.url.rsplit("/", 1)[0]
    shard_map = run_blocking(read_shard_map(ObjectStore.from_url(url, first.options)))
    if shard_map is None:
        raise InvalidArgumentError(f"the store named {name!r} has no shard map at {url}")
    stores = [first] + [plain.connect(shard_name(name, s)) for s in range(1, shard_map.count)]
    return ShardedStore(stores, shard_map, url, name, first.options, first.clock)


def admin(url: str, options: Options | None = None, *,
          clock: Clock | None = None) -> Admin | ShardedAdmin:
    """Administration of the store at ``url`` without Ray (see
    :func:`leveled_ray.admin.handle.admin`): an :class:`Admin`, or for a sharded store a
    :class:`~.admin.ShardedAdmin` over its shards."""
    options = options or Options()
    shard_map = run_blocking(find_shard_map(ObjectStore.from_url(url, options), options))
    if shard_map is None:
        return Admin(url, options, clock)
    return ShardedAdmin(url, shard_map, options, clock)


def reader(url: str, checkpoint: str | None = None, *, options: Options | None = None,
           lifetime: float = 600.0, clock: Clock | None = None, at_sqn=None,
           at_time: float | None = None) -> plain_reader.Reader | ShardedReader:
    """A read-only handle on the store at ``url`` from any process, without Ray (see
    :func:`leveled_ray.client.reader.reader`); on a sharded store, every shard's part of the
    checkpoint (see :mod:`.reader`), and ``at_sqn`` is a position ``{"0": sqn, ...}``."""
    found = admin(url, options, clock=clock)
    if isinstance(found, ShardedAdmin):
        return run_blocking(open_reader(found, checkpoint, lifetime, at_sqn, at_time))
    return plain_reader.reader(url, checkpoint, options=options, lifetime=lifetime, clock=clock,
                               at_sqn=at_sqn, at_time=at_time)


def gc(url: str, min_age: float | None = None, *, dry_run: bool = False,
       options: Options | None = None, progress=None,
       clock: Clock | None = None) -> garbage_collection.Plan:
    """One garbage-collection pass on the store at ``url`` (see
    :func:`leveled_ray.admin.handle.gc`); on a sharded store, every shard's and the root's."""
    return admin(url, options, clock=clock).gc(min_age, dry_run, progress)


def destroy(url: str, soft: bool = True, *, options: Options | None = None) -> int:
    """Destroy the store at ``url`` (see :func:`leveled_ray.admin.handle.destroy`); on a
    sharded store, every shard, then (``soft=False``) its root."""
    return admin(url, options).destroy(soft)
