"""The pure rules of replication: what a change becomes on the target, where the replicator's
position moves, and what a full sync does with each difference it finds.

The position is kept on the target, in the same atomic ``put_many`` as the changes it
follows (an object in :data:`BUCKET`), so a replicator that dies and starts again resumes
exactly after the last batch the target holds: nothing is applied twice, nothing skipped.
Objects the replicator writes carry :data:`MARK` in their metadata, naming the source, so a
full sync can tell them from writes made to the target by anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..admin.compare import DIFFERENT, MISSING_IN_A, MISSING_IN_B, REPLICATION_BUCKET, Difference
from ..codec import Delete, Put
from ..read.changes import Change

#: The target's bucket of replication positions (one object per replication, by its name),
#: which compares leave out.
BUCKET = REPLICATION_BUCKET
#: The metadata key of every object the replicator writes: the source's name.
MARK = "lr.replicated_from"


def write_of(change: Change, source: str, now: float) -> Put | Delete:
    """The target's write for a source change: the same value, metadata (marked), index
    changes and expiry; a put already expired at ``now`` becomes a delete."""
    if change.kind == "delete":
        return Delete(change.bucket, change.key, indexes=change.indexes)
    if change.expires_at is not None and change.expires_at <= now:
        return Delete(change.bucket, change.key, indexes=change.indexes)
    return Put(change.bucket, change.key, change.value, indexes=change.indexes,
               metadata={**(change.metadata or {}), MARK: source},
               expires_at=change.expires_at)  # the source's, to the second


def advance(position, change: Change, labels=None):
    """The position after ``change``: an SQN (a plain source) or ``{"label": sqn}`` (the
    change's ``shard`` is an index into ``labels``, the source's shard map's)."""
    if isinstance(position, dict):
        label = str(change.shard) if labels is None else labels[change.shard]
        return {**position, label: change.sqn}
    return change.sqn


def position_write(name: str, position, source: str, last_modified: float,
                   replaces: int | None) -> Put:
    """The object that records the position, written with the batch it follows, on the
    condition that it replaces the record at SQN ``replaces`` (``None``: that there is none):
    a batch of a replicator that another has taken over from (a dead one's, still in flight)
    is refused whole, so no batch is applied twice."""
    return Put(BUCKET, name, json.dumps({"position": position, "source": source,
                                         "last_modified": last_modified}).encode(),
               if_sqn=replaces, if_absent=replaces is None)


def position_of(record: bytes | None, start):
    """The position a record holds (``start`` when there is none yet)."""
    return start if record is None else json.loads(record)["position"]


@dataclass(frozen=True)
class Repair:
    """What a full sync does with one difference: ``copy`` the source's object to the target,
    ``delete`` it from the target, or leave a ``foreign`` write (one the replicator did not
    make) alone and report it."""

    difference: Difference
    action: str


def repairs(differences: Iterable[Difference], marked: dict[tuple, bool]) -> list[Repair]:
    """The repair of each difference (side ``a`` is the source, ``b`` the target), given
    whether the target's object carries the replicator's mark (``marked[(bucket, key)]``; a
    key the target lacks is absent). A write by anything else is never overwritten; a delete by
    anything else cannot be told from a change the stream missed, and is repaired."""
    out = []
    for d in differences:
        if d.bucket == BUCKET:
            continue
        if d.kind == MISSING_IN_B:
            out.append(Repair(d, "copy"))
        elif not marked.get((d.bucket, d.key), False):
            out.append(Repair(d, "foreign"))
        elif d.kind == DIFFERENT:
            out.append(Repair(d, "copy"))
        elif d.kind == MISSING_IN_A:
            out.append(Repair(d, "delete"))
    return out
