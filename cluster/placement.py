"""Where a sharded store's Bookies run: one placement-group bundle per shard, spread over the
nodes with Ray's own SPREAD strategy (each Bookie's Penciller and clerk follow it to its node:
see :func:`leveled_ray.actors.remote.spawn`)."""

from __future__ import annotations

#: What a shard's bundle reserves: next to nothing (its actors take no CPU slot), but a bundle
#: must hold some resource for Ray to place it on a node.
BUNDLE = {"CPU": 0.01}


def placement_name(name: str) -> str:
    return f"{name}.shards"


def spread(count: int, name: str | None, detached: bool):
    """A ready placement group of ``count`` bundles spread over the nodes (named after the
    store, and detached with it, when it is)."""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group([dict(BUNDLE) for _ in range(count)], strategy="SPREAD",
                            name=placement_name(name) if name else "",
                            lifetime="detached" if detached else None)
    ray.get(group.ready())
    return group


def bundle(group, index: int):
    """The scheduling strategy that puts an actor in bundle ``index`` of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index,
                                            placement_group_capture_child_tasks=False)


def remove(group) -> None:
    """Give the bundles back (once the shards' actors are stopped)."""
    if group is None:
        return
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(group)


def named(name: str | None):
    """The placement group named ``name`` (:func:`placement_name`,
    :func:`shard_placement_name`), if there is one."""
    if name is None:
        return None
    from ray.util import get_placement_group

    try:
        return get_placement_group(name)
    except ValueError:
        return None


def on_node(node_id: str, name: str | None, detached: bool):
    """A ready placement group of one bundle on node ``node_id`` (named ``name``), for one
    shard that was moved or split: Ray moves the bundle to another node if that one dies, so
    the shard fails over as the others do. (A node-affinity strategy would not do: a hard one
    never restarts the actor elsewhere, and a soft one was seen to ignore the node.)"""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group([dict(BUNDLE)], strategy="STRICT_PACK", name=name or "",
                            lifetime="detached" if detached else None,
                            _soft_target_node_id=node_id)
    ray.get(group.ready())
    return group


def shard_placement_name(actor_name: str | None) -> str | None:
    """The name of the placement group of a shard that moved or split, after the name of
    the actor that runs its Bookie (``None`` for none)."""
    return None if actor_name is None else f"{actor_name}.placement"


def alive_nodes() -> list[str]:
    """The ids of the Ray nodes alive now."""
    import ray

    return sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
