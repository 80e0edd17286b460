"""Where a split shard's history stops being its ancestors': pure functions.

A split's children go on from their parent's SQNs (see :mod:`leveled_ray.cluster.split`), so
below the parent's newest SQN at the split they share one history, each holding its own keys'
changes of it once journal compaction has rewritten it. A past view of the store must take one
position inside that shared history for all of them (see
:func:`~leveled_ray.manifest.batch_tags.one_history`): each child's changes alone would give
each a different one, and a group of changes the parent applied together would be seen in part.

A child's manifest records, as the setting ``split_points``, each ancestor's label with its
newest SQN at the split that made its children (``"0:120,0.1:845"``), inherited by later splits.
"""

from __future__ import annotations

from ..errors import CorruptObjectError
from .model import Manifest

#: The manifest setting that records a split shard's ancestors' split points.
SETTING = "split_points"

#: Ancestor label -> its newest SQN when it split.
SplitPoints = dict[str, int]


def split_points(manifest: Manifest) -> SplitPoints:
    """The split points ``manifest`` records (none for a shard that never split)."""
    text = manifest.setting(SETTING)
    if not text:
        return {}
    try:
        points = {label: int(sqn) for label, sqn in
                  (item.rsplit(":", 1) for item in text.split(","))}
    except ValueError:
        raise CorruptObjectError("manifest", 0, f"damaged {SETTING} setting {text!r}") from None
    if any(sqn < 0 or not label for label, sqn in points.items()):
        raise CorruptObjectError("manifest", 0, f"damaged {SETTING} setting {text!r}")
    return points


def newest_sqn(manifest: Manifest) -> int:
    """The newest SQN ``manifest`` holds (its Ledger's or its Journal's, recorded)."""
    return max(manifest.ledger_sqn, manifest.max_journal_sqn)


def children_points(parent: Manifest, label: str) -> str:
    """The setting a split's children record: the parent's split points and its own
    (``parent``: its manifest once quiet and claimed, with its journal tail recorded)."""
    points = {**split_points(parent), label: newest_sqn(parent)}
    return ",".join(f"{lb}:{sqn}" for lb, sqn in sorted(points.items()))
