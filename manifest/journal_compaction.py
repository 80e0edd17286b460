"""Journal compaction rules (leveled's ``leveled_iclerk``), as pure functions.

A journal file's score is the share of its sampled entries that are still current (100 means
nothing to reclaim). Runs of up to ``max_run_length`` consecutive files are scored by their
average, against a target that rises from ``single_pct`` for one file to ``max_run_pct`` for a
full-length run; the run furthest below its target is compacted, if any run is below it.
Before any scoring, runs of small files are merged (see :func:`small_run`).

When a run is rewritten, an entry stays if it is current in the Ledger, above the Ledger's
persisted SQN (the Ledger may still need it for recovery), or held for history (see
:func:`plan_rewrite` and :mod:`leveled_ray.manifest.history`). A replaced entry is dropped under
``recovr``; under ``retain`` its key changes stay as a *key delta* (no value), so a Ledger rebuilt
from the Journal still has its full index history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..codec import OP_DELETE, OP_KEY_DELTA
from ..options import RETAIN


def file_score(current: int, sampled: int) -> float:
    """100 x current / sampled (an unsampled, empty file scores 0: all of it is reclaimable)."""
    return 100.0 * current / sampled if sampled else 0.0


def run_target(length: int, max_run_length: int, single_pct: float, max_run_pct: float) -> float:
    if max_run_length <= 1:
        return single_pct
    return single_pct + (max_run_pct - single_pct) * (length - 1) / (max_run_length - 1)


@dataclass(frozen=True)
class Run:
    start: int
    length: int
    score: float
    target: float


def best_run(scores: list[float], max_run_length: int, single_pct: float,
             max_run_pct: float) -> Run | None:
    """The contiguous run to compact, or ``None`` when no run beats its target."""
    best: Run | None = None
    for start in range(len(scores)):
        for length in range(1, min(max_run_length, len(scores) - start) + 1):
            score = sum(scores[start : start + length]) / length
            target = run_target(length, max_run_length, single_pct, max_run_pct)
            if score < target and (best is None or target - score > best.target - best.score):
                best = Run(start, length, score, target)
    return best


def small_run(sizes: list[int], small_bytes: int, files: int,
              max_bytes: int) -> tuple[int, int] | None:
    """The oldest run of consecutive *small* files worth rewriting as one, as ``(start,
    length)``; ``None`` while there is none. A file is small under ``small_bytes`` (and under
    half of ``max_bytes``, so that the rewritten file fits). A run goes once it has ``files``
    files, or ``small_bytes`` in all: then its file is not small any more.

    Every group commit writes its own journal file, so single puts leave one small file per
    put, each costing an object and a manifest row. Their scores do not matter: merging them
    is what bounds the number of files, to about one per ``small_bytes`` of the Journal. Only
    runs closed by their count (values of a few hundred bytes) are small again, and are merged
    again with the next ones until they are not."""
    small_bytes = min(small_bytes, max_bytes // 2)
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if size >= small_bytes:
            start, total = i + 1, 0
            continue
        total += size
        if i + 1 - start >= files or total >= small_bytes:
            return start, i + 1 - start
    return None


@dataclass(frozen=True)
class Fate:
    """What compaction does with one journal entry: keep it (``op`` may become a key delta,
    with the value dropped), or drop it (``op`` is ``None``)."""

    op: int | None
    keep_value: bool = True
    indexes: tuple = ()
    #: Kept whole only because history holds it (it would go without ``protect``).
    held: bool = False


def plan_rewrite(records: Sequence[tuple[int, int, bytes, tuple]],
                 current: dict[bytes, int | None], persisted_sqn: int, strategy: str,
                 protect: int | None) -> tuple[list[Fate], int]:
    """Decide each entry of a run of consecutive journal files, and the new lower bound on
    ``history_sqn`` the run's rewrite needs.

    ``records`` are ``(sqn, op, lkey, indexes)`` in SQN order; ``current`` gives each key's
    newest SQN in the Ledger (``None``: no entry, as after a delete whose tombstone was reaped).

    An entry stays whole if the Ledger may still need it (above ``persisted_sqn``), if it is
    current, if it is above ``protect``, or unless its *successor* (the key's next change) is
    known and at or below ``protect``: then no position at or above ``protect`` needs it. Its
    successor is the key's next entry in the run (a run holds every SQN between its first and
    last), else the key's current SQN. An entry that loses its value (dropped, or a key delta
    under ``retain``) raises the bound to its successor, or to ``persisted_sqn`` when the
    successor is unknown (a reaped delete is in the Ledger's files, so at or below it).
    """
    successors: list[int | None] = [None] * len(records)
    last_at: dict[bytes, int] = {}
    for i, (sqn, _, lkey, _) in enumerate(records):
        j = last_at.get(lkey)
        if j is not None:
            successors[j] = sqn
        last_at[lkey] = i
    fates, bound = [], 0
    for (sqn, op, lkey, indexes), succ in zip(records, successors):
        now_sqn = current.get(lkey)
        if succ is None and now_sqn is not None and now_sqn > sqn:
            succ = now_sqn
        needed = sqn > persisted_sqn or now_sqn == sqn
        held = not needed and protect is not None and (
            sqn > protect or succ is None or succ > protect)
        if needed or held or op == OP_KEY_DELTA:  # a key delta has nothing more to lose
            fates.append(Fate(op, op != OP_KEY_DELTA, indexes, held and op != OP_KEY_DELTA))
            continue
        bound = max(bound, persisted_sqn if succ is None else succ)
        fates.append(_without_value(op, indexes, strategy))
    return fates, bound


def _without_value(op: int, indexes: tuple, strategy: str) -> Fate:
    """A replaced entry: dropped under ``recovr``; under ``retain`` its key changes stay as a
    key delta, so a Ledger rebuilt from the Journal still has its full index history."""
    if strategy != RETAIN:
        return Fate(None)
    if op == OP_DELETE:  # a replaced delete's index changes were all removals
        indexes = tuple((1, field, term) for _, field, term in indexes)
    if not indexes:
        return Fate(None)  # a key delta with no index changes would record nothing
    return Fate(OP_KEY_DELTA, False, indexes)
