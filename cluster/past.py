"""A sharded store as it was at a past time: one position per shard, with no cross-shard
batch held in part (the rule is :func:`~leveled_ray.manifest.batch_tags.whole_batches`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..errors import HistoryUnavailableError
from ..manifest.batch_tags import Found, one_history, whole_batches
from ..manifest.history import check_covered
from ..read.history_view import batch_spans, sqn_at_time
from ..read.point_in_time import PointInTime

#: SQNs read below a shard's position in one step, at first (doubled each step).
FIRST_STEP = 1024


async def positions_at_time(views: list[PointInTime], at_time: float,
                            labels: Sequence[str]) -> list[int]:
    """Each shard's position (SQN) for a view of the store as it was at Unix time
    ``at_time``, given views of now taken at one cut (``views[s]``: shard ``s``): the newest
    position whose changes were all written by then (see
    :func:`~leveled_ray.read.history_view.sqn_at_time`), lowered until every cross-shard
    batch is inside the view on all its shards or on none (``labels``: the shards'), and the
    children of a split take one position inside the history they share (see
    :func:`~leveled_ray.manifest.batch_tags.one_history`). Raises
    :class:`~leveled_ray.errors.HistoryUnavailableError` if that needs history the Journal
    no longer keeps."""
    positions = list(await asyncio.gather(*(sqn_at_time(v, at_time) for v in views)))
    found = list(await asyncio.gather(*(batch_spans(v, p, v.sqn)
                                        for v, p in zip(views, positions))))
    floors, steps = list(positions), [FIRST_STEP] * len(views)
    points = [v.split_points for v in views]
    while True:
        positions = one_history(positions, points, labels)
        for s, view in enumerate(views):  # the batches of what one_history left out
            if positions[s] < floors[s]:
                check_covered(view.history_sqn, positions[s])
                _merge(found[s], await batch_spans(view, positions[s], floors[s]))
                floors[s] = positions[s]
        positions, wanted = whole_batches(positions, found, floors, labels)
        if one_history(positions, points, labels) != positions:
            continue
        if not wanted:
            return positions
        deeper = {s: tags for s, tags in wanted.items() if floors[s] > views[s].history_sqn}
        if not deeper:  # a batch must go, and no shard that may hold it can look further
            s = min(wanted)
            raise HistoryUnavailableError(views[s].history_sqn - 1, views[s].history_sqn)
        for s, tags in sorted(deeper.items()):  # a child that read its whole history waits
            bottom = views[s].history_sqn  # for a sibling to find the part: see whole_batches
            lower = max(bottom, floors[s] - steps[s])
            _merge(found[s], await batch_spans(views[s], lower, floors[s]))
            floors[s], steps[s] = lower, 2 * steps[s]


def _merge(found: Found, spans: Found) -> None:
    """Add the batch spans read below a shard's floor to those found above it."""
    for tag, (lo, hi) in spans.items():
        old = found.get(tag, (lo, hi))
        found[tag] = (min(lo, old[0]), max(hi, old[1]))
