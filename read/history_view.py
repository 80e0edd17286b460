"""Point-in-time views: the store exactly as it was at an earlier SQN (or time), built from a
view of now and the Journal's history (see :mod:`leveled_ray.manifest.history`).

For SQN ``s`` at or above the view's ``history_sqn``, the keys changed after ``s`` are those of
``changes(s)``; each of them reads as its newest change at or below ``s`` (found by reading
the Journal backwards from ``s``, which history keeps), or as absent if it has none. Every
other key reads as it does now. The result is the view of now with one more overlay batch:
those keys' entries as of ``s`` (tombstones for the absent), and their index entries as they
were (the terms added since removed, the terms held then restored).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import OP_DELETE, LedgerRows, split_object_key, unpack_extra, value_hash
from ..codec.entries import ACTIVE, TOMBSTONE
from ..codec.index_terms import held_terms
from ..codec.keys import index_key
from ..errors import InvalidArgumentError
from ..manifest.history import check_covered, check_position
from ..options import check_number
from .changes import SPAN_BYTES, journal_changes
from .point_in_time import PointInTime

#: Rows a scan of the changes after ``s`` takes at a time.
_BATCH = 65_536


async def sqn_at_time(view: PointInTime, at_time: float) -> int:
    """The newest position whose changes were all written at or before ``at_time`` (Unix
    seconds): one below the lowest SQN of a change written later (``view.sqn`` if none).

    Not the newest change written by then: a bulk write's SQNs are reserved when it begins,
    and its changes are written (and installed) later, so a change written by then can follow
    one written after. The Journal is read from where history begins up to the first file
    holding a change written later (files hold disjoint SQN ranges)."""
    if not isinstance(at_time, (int, float)) or isinstance(at_time, bool):
        raise InvalidArgumentError(f"at_time must be Unix seconds, not {at_time!r}")
    limit = int(at_time * 1000)
    files = [f for f in view.journal.files
             if f.entries and f.max_sqn >= view.history_sqn and f.min_sqn <= view.sqn]
    for info in sorted(files, key=lambda f: f.min_sqn):
        clerk = view.host.journal(info)
        rows_all = np.arange(len((await clerk.footer()).sqns))
        later = []
        async for rows in clerk.row_spans(rows_all, SPAN_BYTES):
            sqns = rows.column("sqn").to_numpy()
            after = (rows.column("last_modified").to_numpy() > limit) & (sqns <= view.sqn)
            if after.any():
                later.append(int(sqns[after].min()))
        if later:
            return min(later) - 1
    return view.sqn


async def batch_spans(view: PointInTime, after: int, until: int) -> dict[bytes, tuple[int, int]]:
    """Each cross-shard batch with a change in ``after < sqn <= until`` (by its tag in the
    Journal, see :mod:`~leveled_ray.manifest.batch_tags`): its lowest and highest SQN there."""
    spans: dict[bytes, tuple[int, int]] = {}
    if until <= after:
        return spans
    async for rows in journal_changes(view, after, until, _BATCH):
        tagged = rows.filter(pc.is_valid(rows.column("batch")))
        for tag, sqn in zip(tagged.column("batch").to_pylist(),
                            tagged.column("sqn").to_pylist()):
            lo, hi = spans.get(tag, (sqn, sqn))
            spans[tag] = (min(lo, sqn), max(hi, sqn))
    return spans


async def view_at(view: PointInTime, sqn: int) -> PointInTime:
    """``view`` as the store was at ``sqn`` (at or below ``view.sqn``; refused below
    ``view.history_sqn`` with :class:`~leveled_ray.errors.HistoryUnavailableError`)."""
    check_position(sqn)
    if sqn > view.sqn:
        raise InvalidArgumentError(f"SQN {sqn} is after this view (SQN {view.sqn})")
    check_covered(view.history_sqn, sqn)
    if sqn == view.sqn:
        return view
    changed: set[bytes] = set()
    async for rows in journal_changes(view, sqn, None, _BATCH):
        changed.update(rows.column("lkey").to_pylist())
    then = await _newest_at_or_below(view, sqn, changed)
    now = dict(zip(sorted(changed), await view.entries(sorted(changed))))
    overlay = LedgerRows()
    now_s = view.clock()
    for lkey in sorted(changed):
        record = then.get(lkey)
        current = now.get(lkey)
        if record is None or record["op"] == OP_DELETE:
            overlay.add(lkey, 0 if record is None else record["sqn"], TOMBSTONE, 0, 0, 0,
                        0 if record is None else record["last_modified"], b"")
            held_then: set = set()
        else:
            value = record["value"] or b""
            overlay.add(lkey, record["sqn"], ACTIVE, record["expiry"], value_hash(value),
                        len(value), record["last_modified"], record["extra"] or b"")
            held_then = set(unpack_extra(record["extra"])[1]) if record["extra"] else set()
        bucket, key = split_object_key(lkey)
        for field_name, term in held_terms(current, now_s) - held_then:
            overlay.add(index_key(bucket, field_name, term, key), 0, TOMBSTONE, 0, 0, 0, 0, b"")
        for field_name, term in held_then:
            overlay.add(index_key(bucket, field_name, term, key), record["sqn"], ACTIVE,
                        record["expiry"], 0, 0, record["last_modified"], b"")
    past = PointInTime(view.url, view.options, view.files, view.journal.files,
                       [*_overlay_batches(view), overlay.to_batch()], sqn,
                       store=view._store, routes=view.routes, host=view._host,
                       clock=view.clock, history_sqn=view.history_sqn, past=True,
                       split_points=view.split_points)
    return past


def _overlay_batches(view: PointInTime) -> list[pa.RecordBatch]:
    if view._overlay is not None:  # already a dict: send it as one batch
        return [LedgerRows.from_entries(view._overlay.items()).to_batch()]
    return list(view._batches)


async def _newest_at_or_below(view: PointInTime, sqn: int, keys: set[bytes]) -> dict:
    """Each key's newest put or delete at or below ``sqn`` (a journal row as a dict),
    reading the Journal backwards from ``sqn`` until every key is found or it ends."""
    found: dict[bytes, dict] = {}
    wanted = pa.array(sorted(keys), pa.binary())
    files = [f for f in view.journal.files if f.entries and f.min_sqn <= sqn]
    for info in sorted(files, key=lambda f: f.min_sqn, reverse=True):
        if len(found) == len(keys):
            break
        clerk = view.host.journal(info)
        sqns = (await clerk.footer()).sqns
        rows_wanted = np.flatnonzero(sqns <= sqn)
        spans = [rows async for rows in clerk.row_spans(rows_wanted, SPAN_BYTES)]
        for rows in reversed(spans):  # newest first
            hits = rows.filter(pc.and_(pc.is_in(rows.column("lkey"), value_set=wanted),
                                       pc.less_equal(rows.column("op"), OP_DELETE)))
            for row in reversed(hits.to_pylist()):
                if row["lkey"] not in found:
                    found[row["lkey"]] = row
    return found


def check_moment(at_sqn, at_time: float | None) -> None:
    """At most one of ``at_sqn`` and ``at_time``, and ``at_time`` Unix seconds (finite,
    >= 0). ``at_sqn`` is checked where it is read: an SQN, or a sharded store's position."""
    if at_sqn is not None and at_time is not None:
        raise InvalidArgumentError("give at most one of at_sqn and at_time")
    if at_time is not None:
        check_number("at_time", at_time, minimum=0)


async def as_of(view: PointInTime, at_sqn: int | None = None,
                at_time: float | None = None) -> PointInTime:
    """``view`` as it was at SQN ``at_sqn``, or at Unix time ``at_time`` (the newest
    position whose changes were all written by then, see :func:`sqn_at_time`): exactly one
    of them."""
    if at_sqn is None and at_time is None:
        raise InvalidArgumentError("give one of at_sqn and at_time")
    check_moment(at_sqn, at_time)
    if at_time is not None:
        at_sqn = await sqn_at_time(view, at_time)
    return await view_at(view, at_sqn)
