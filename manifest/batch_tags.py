"""Cross-shard batches in the Journal, and the rule that keeps a past view of a sharded store
from holding one in part.

A shard applies its part of a cross-shard ``put_many`` as one group of changes, each tagged in
its Journal with the batch (:func:`batch_tag`: the batch's id and the shards it spans). The
parts of one batch are applied at different moments (a shard that was down applies its part
when it reopens), so the newest change of each shard at a time ``t`` can hold one part of a
batch without another. :func:`whole_batches` lowers such positions until every batch is inside
the view on all its shards or on none; a position only goes down, so the view never holds a
change written after ``t``. :func:`one_history` does the same for the changes a shard applied
together before it split, which carry no tag: its children take one position inside the history
they share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgpack

#: Per shard: each batch tag found in its Journal -> ``(lowest SQN, highest SQN)`` there.
Found = dict[bytes, tuple[int, int]]


def batch_tag(txn: str, labels: Iterable[str]) -> bytes:
    """The tag a batch's changes carry in each shard's Journal: the batch's id and the labels
    of the shards it spans (a label names one shard for good; indexes shift in a split)."""
    return msgpack.packb([txn, sorted(labels)])


def tag_shards(tag: bytes) -> list[str]:
    """The labels of the shards a batch spans, from its tag (older tags hold shard numbers,
    which were the shards' labels: none had split)."""
    return sorted(str(s) for s in msgpack.unpackb(tag)[1])


def holders(label: str, labels: Sequence[str]) -> list[int]:
    """The shards (indexes in ``labels``) that hold what shard ``label`` held: itself, or its
    descendants once it split (each inherited its Journal)."""
    return [s for s, mine in enumerate(labels) if mine == label or mine.startswith(label + ".")]


def whole_batches(positions: list[int], found: list[Found], floors: list[int],
                  labels: Sequence[str] | None = None
                  ) -> tuple[list[int], dict[int, set[bytes]]]:
    """Lower ``positions`` (one SQN per shard) until no batch is inside on one shard and
    outside on another. ``found[s]`` holds every tagged batch with a change in shard ``s``
    above ``floors[s]`` (read so far) and at or below the view's newest SQN.

    Returns the positions and, per shard, the batches still to look for below its floor:
    those outside the view on some shard that span this one and were not found here yet.
    Until that is empty the positions are not final. (A view taken at a cut holds each batch
    on all its shards or none, so a batch wanted on a shard is there below its floor; one
    older than the history kept cannot be left out, and the caller must refuse the time.)
    ``labels[s]`` is shard ``s``'s label (default ``str(s)``). A batch is looked for in
    each shard that may hold it (each child of a shard it spans that split since) until each
    read the SQN below the lowest found: a part is one run of SQNs."""
    labels = [str(s) for s in range(len(found))] if labels is None else list(labels)
    positions = list(positions)
    while True:
        outside = {tag for s, spans in enumerate(found) for tag, (_, hi) in spans.items()
                   if hi > positions[s]}
        lowered = False
        for s, spans in enumerate(found):
            inside = [lo for tag, (lo, _) in spans.items()
                      if tag in outside and lo <= positions[s]]
            if inside:
                positions[s] = min(inside) - 1
                lowered = True
        if not lowered:
            break
    wanted: dict[int, set[bytes]] = {}
    for tag in outside:
        for label in tag_shards(tag):
            mine = holders(label, labels)
            seen = [found[s][tag][0] for s in mine if tag in found[s]]
            # A part is one run of SQNs, each held by one of ``mine`` (a split's children
            # hold their parent's part at its SQNs, each its own keys). Once each of them
            # read the SQN below the lowest found (``below``) without it, the part starts
            # above: all of it was found. Until then, those that did not read it look on.
            below = min(seen) - 1 if seen else None
            for s in mine:
                if below is None and tag not in found[s] or \
                        below is not None and floors[s] >= below > 0:
                    wanted.setdefault(s, set()).add(tag)
    return positions, wanted


def one_history(positions: list[int], points: Sequence[dict[str, int]],
                labels: Sequence[str]) -> list[int]:
    """Lower ``positions`` (one SQN per shard) until the shards that descend from one split
    shard take one position inside the history they share: the lowest of theirs, wherever
    that is below the split shard's newest SQN at the split. ``points[s]``: shard ``s``'s
    split points (see :mod:`~leveled_ray.manifest.split_points`); ``labels[s]``: its label.

    Each child's position at a time comes from its own keys' changes, so inside the shared
    history two children can cut at different SQNs, and a group of changes the parent applied
    together (a ``put_many``, untagged) would be seen in one child and not in the other."""
    positions = list(positions)
    tops: dict[str, int] = {}
    for mine in points:
        for label, top in mine.items():
            tops[label] = min(top, tops.get(label, top))
    lowered = True
    while lowered:
        lowered = False
        for label, top in sorted(tops.items()):
            group = holders(label, labels)
            low = min((positions[s] for s in group), default=top)
            for s in group:
                if low < top and positions[s] > low:
                    positions[s], lowered = low, True
    return positions
