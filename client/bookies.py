"""The Bookie lifecycle, as a client drives it: the checks of an open, starting Bookies
(spares first, all at once), opening their stores, stopping them, and finding a running one
by name. ``lr.open``, ``lr.connect``, splits and moves build on these."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..actors import bookie as bookie_mod
from ..actors.remote import NAMESPACE
from ..clock import Clock, system_clock
from ..codec import head_only as head_only_mode
from ..errors import InvalidArgumentError
from ..files.store import ObjectStore
from ..files.store_config import StoreConfig
from ..options import Options
from . import actor_names, spares
from .calls import _get
from .ray_connection import ensure_ray
from .store import Store


def check_open(url, options, name, detached, head_only, clock
               ) -> tuple[Options, Clock, StoreConfig]:
    """The checked arguments of an open: ``(options, clock, the store's config)`` (its URL
    parsed, here only), or InvalidArgumentError."""
    options = options if options is not None else Options()
    if not isinstance(options, Options):
        raise InvalidArgumentError(f"options must be an lr.Options, not {type(options).__name__}")
    config = StoreConfig.from_options(url, options)
    head_only_mode.check_mode(head_only)
    if name is not None and (not isinstance(name, str) or not name or "/" in name):
        raise InvalidArgumentError(f"name must be a non-empty str without '/', not {name!r}")
    if detached and name is None:
        raise InvalidArgumentError("a detached store needs a name, so it can be reached again")
    clock = system_clock if clock is None else clock
    if not callable(clock):
        raise InvalidArgumentError(f"clock must be a callable returning Unix seconds, not "
                                   f"{clock!r}")
    return options, clock, config


def refuse_running(*names: str | None) -> None:
    """InvalidArgumentError if a Bookie runs under any of ``names`` already."""
    import ray

    for name in names:
        if name is None:
            continue
        try:
            ray.get_actor(actor_names.resolve(name), namespace=NAMESPACE)
        except ValueError:
            continue
        raise InvalidArgumentError(f"a store named {name!r} is already running: use "
                                   f"lr.connect({name!r})")


class BookieSpec(NamedTuple):
    """One Bookie to start: its store's URL, its actor name, its object store client (made
    from the URL if not given), Ray scheduling options (a placement group bundle), and for a shard
    of a sharded store, ``(the store's name or URL, the shard's label)``."""

    url: str
    name: str | None = None
    store: ObjectStore | None = None
    scheduling: object = None
    shard: tuple[str, str] | None = None


def start_bookies(specs: Sequence[BookieSpec], options: Options, *, detached: bool,
                  head_only: str | None, clock: Clock) -> list[Store]:
    """Start one Bookie per spec, all at once, and wait until every one has opened its store.
    If any fails, every one is stopped and its error raised."""
    return open_bookies(create_bookies(specs, options, detached=detached, head_only=head_only,
                                       clock=clock), specs, options, clock)


def create_bookies(specs: Sequence[BookieSpec], options: Options, *, detached: bool,
                   head_only: str | None, clock: Clock) -> list:
    """One Bookie actor per spec, its process starting, its store not yet opened (see
    :func:`open_bookies`): a split starts its children's processes before it closes the
    shard. A plain Bookie is a spare, if one is waiting (:mod:`.spares`)."""
    actors = []
    for spec in specs:
        plain = spec.name is None and spec.scheduling is None and not detached
        spare = spares.take(plain=plain, options=options, url=spec.url, store=spec.store,
                            head_only=head_only, clock=clock, shard=spec.shard)
        if spare is not None:
            actors.append(spare)
            continue
        opts = {"namespace": NAMESPACE, "max_restarts": options.max_restarts}
        if spec.name is not None:
            opts["name"] = spec.name
        if detached:
            opts["lifetime"] = "detached"
        if spec.scheduling is not None:
            opts["scheduling_strategy"] = spec.scheduling
        actors.append(bookie_mod.make_actor().options(**opts).remote(
            spec.url, options, spec.name, store=spec.store, head_only=head_only, clock=clock,
            shard=spec.shard))
    return actors


def open_bookies(actors: list, specs: Sequence[BookieSpec], options: Options,
                 clock: Clock) -> list[Store]:
    """Open the stores of Bookies from :func:`create_bookies`, all at once; if any fails,
    every one is stopped and its error raised."""
    try:
        infos = _get([actor.start.remote() for actor in actors])
    except BaseException:
        stop_bookies(actors)
        raise
    return [Store(actor, options, spec.url, spec.name, info, clock)
            for actor, spec, info in zip(actors, specs, infos)]


def stop_bookies(actors: list) -> None:
    """End Bookie actors at once (no close, no restart)."""
    import ray

    for actor in actors:
        ray.kill(actor, no_restart=True)


def connect_bookie(name: str, *, address: str | None = None) -> Store:
    """A handle on the running Bookie named ``name`` (a plain store's, or one shard's): what
    :func:`leveled_ray.connect` builds on. ``address`` as there."""
    ensure_ray(address, join=True)  # a store that runs is on a cluster that runs: never start one
    import ray

    try:
        actor = ray.get_actor(actor_names.resolve(name), namespace=NAMESPACE)
    except ValueError:
        raise InvalidArgumentError(f"no running store named {name!r}") from None
    stats = _get(actor.stats.remote())
    return Store(actor, _get(actor.get_options.remote()), stats["url"], name,
                 {"head_only": stats["head_only"]}, _get(actor.get_clock.remote()))
