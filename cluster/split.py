"""Splitting a shard into two, by reference: nothing is copied.

Each child is a clone (see :mod:`leveled_ray.admin.clone`) of the shard, owning half its run of
partitions (the manifest setting ``owns``, see :mod:`leveled_ray.codec.owned`). It reads the
shard's files where they are, leaving out the other child's keys, and its merges and journal
compaction drop those keys as they rewrite; once it shares no file, GC detaches it. A child's
SQNs go on from the shard's, so a position taken before the split reads on in both children.

The steps, each safe to die after (create-if-absent and the shard's own manifest decide):

1. ``quiet``: the shard has no live writer and no prepared cross-shard part (a running store
   closes the shard's Bookie first).
2. ``claim``: the splitter takes the shard's writer epoch ``e``, as an open does: a writer
   that opens the shard after this fences the split, which is then abandoned. It looks for
   prepared parts again: a bulk write at rest claims the shard after leaving its part, so
   a part left after step 1 is seen now, or its claim fences the split.
3. ``children``: the two clones, under prefixes named after ``e`` (``shard-001.0-e7``), each
   pinning the shard's newest version (the journal's tail recorded first), with the shard's
   history leases (its consumers read on in both children) and where their shared history
   ends (:mod:`~leveled_ray.manifest.split_points`).
4. ``retire``: the commit point, one CAS on the shard's manifest
   (:func:`~leveled_ray.manifest.transitions.retire_for_split`): if ``e`` is still the
   shard's epoch, the shard records ``split_epoch = e`` and is fenced and destroyed for good.
   A split that dies before this leaves the old layout; after it, the new one.
5. ``publish``: the next shard map version, with the shard replaced by its children. Whoever
   reads the layout next does this too (:func:`settle_splits`), so a split that died after
   step 4 is published by the next open, reader or admin.

A split that dies before step 4 leaves its children's prefixes unused: they are never read.
Their pins on the shard (named ``clone:<child url>``) are released when a later split retires
it; their objects are kept (nothing yet proves them abandoned).
"""

from __future__ import annotations

from collections.abc import Callable

from ..admin.checkpoints import record_tail, release_checkpoint
from ..admin.clone import create_clone
from ..admin.handle import Admin
from ..clock import system_clock
from ..codec.owned import SETTING as OWNS
from ..codec.owned import Owns
from ..errors import InvalidArgumentError
from ..files.store import ObjectStore
from ..manifest import transitions
from ..manifest.shard_map import ShardMap, create_shard_map, read_shard_map
from ..manifest.split_points import SETTING as SPLIT_POINTS
from ..manifest.split_points import children_points
from ..manifest.store import ManifestStore
from ..options import Options
from .quiet import check_no_parts, check_quiet

#: The steps of a split, in order (a test stops the split after each).
STEPS = ("quiet", "claim", "children", "retire", "publish")


def children_tag(epoch: int) -> str:
    """What a split's children's prefixes end with: the splitter's epoch on the shard."""
    return f"-e{epoch}"


async def split_shard(url: str, shard: int, options: Options | None = None, *,
                      after_step: Callable[[str], None] | None = None) -> ShardMap:
    """Split shard ``shard`` of the sharded store at ``url`` (no Bookie running on that
    shard) into two; returns the shard map that holds the children. ``after_step(name)`` is
    called after each of :data:`STEPS`."""
    options = options or Options()
    root = ObjectStore.from_url(url, options)
    url = root.url  # as every other step names the shards (the pins' names among them)
    shard_map = await settle_splits(root, await _shard_map(root, url), options)
    shard_map.split(shard)  # refused here if it cannot split, before anything is written
    done = after_step or (lambda step: None)
    parent_url = shard_map.shard_url(url, shard)
    await check_quiet(Admin(parent_url, options), shard,
                      "close the store to split a shard without Ray")
    done("quiet")
    manifests = ManifestStore(ObjectStore.from_url(parent_url, options))
    _, claimed = await manifests.update(transitions.bump_epoch)
    epoch = claimed.writer_epoch
    # Again after the claim: a bulk write's part left since the first look claims the shard
    # after leaving it (bulk/sharded.py), so it fences this split or is seen here.
    await check_no_parts(Admin(parent_url, options), shard)
    done("claim")
    child_map = shard_map.split(shard, children_tag(epoch))
    # Where the children's shared history ends (every acknowledged write is in the tail).
    points = children_points((await record_tail(manifests)).manifest, shard_map.labels[shard])
    for child in (shard, shard + 1):
        start, end = child_map.runs[child]
        await create_clone(parent_url, child_map.shard_url(url, child), options=options,
                           settings={OWNS: Owns(shard_map.route_by, start, end).encode(),
                                     SPLIT_POINTS: points},
                           leases=True)
    done("children")
    await manifests.update(lambda m: transitions.retire_for_split(m, epoch, system_clock()))
    done("retire")
    settled = await settle_splits(root, shard_map, options)
    done("publish")
    return settled


async def _shard_map(root: ObjectStore, url: str) -> ShardMap:
    found = await read_shard_map(root)
    if found is None:
        raise InvalidArgumentError(f"no sharded store at {url}")
    return found


async def settle_splits(root: ObjectStore, shard_map: ShardMap, options: Options) -> ShardMap:
    """The newest layout: ``shard_map`` (the newest version read), with every shard that a
    split retired replaced by its children, each such change published as the next version
    (create-if-absent: when another reader published it first, its version is read)."""
    while True:
        retired = await _retired(root, shard_map, options)
        if retired is None:
            return shard_map
        shard, epoch = retired
        nxt = shard_map.split(shard, children_tag(epoch))
        stored = await create_shard_map(root, nxt)  # or the one a rival published first
        if stored.same_layout(nxt):
            await _release_abandoned(root, shard_map.prefixes[shard],
                                     nxt.prefixes[shard:shard + 2], options)
        shard_map = stored if stored.same_layout(nxt) else await _shard_map(root, root.url)


async def _release_abandoned(root: ObjectStore, prefix: str, children: tuple[str, ...],
                             options: Options) -> None:
    """Release the pins that splits of shard ``prefix`` abandoned before the one that retired
    it (their children are never read): its GC then waits for no one else."""
    parent = ManifestStore(ObjectStore.from_url(f"{root.url.rstrip('/')}/{prefix}", options))
    latest = await parent.latest()
    base = f"clone:{root.url.rstrip('/')}/{prefix}."
    mine = {f"clone:{root.url.rstrip('/')}/{child}" for child in children}
    for pin in () if latest is None else latest.manifest.checkpoints:
        if pin.name and pin.name.startswith(base) and pin.name not in mine:
            await release_checkpoint(parent, pin.id)


async def _retired(root: ObjectStore, shard_map: ShardMap,
                   options: Options) -> tuple[int, int] | None:
    """The first shard of ``shard_map`` a split retired, and the split's epoch."""
    for shard in range(shard_map.count):
        store = ObjectStore.from_url(shard_map.shard_url(root.url, shard), options)
        latest = await ManifestStore(store).latest()
        if latest is not None and latest.manifest.split_epoch is not None:
            return shard, latest.manifest.split_epoch
    return None
