"""The Ledger's levels: when to merge, what to merge, and the manifest change a merge makes.

Pure functions over the manifest, as in leveled's ``leveled_pmanifest``. Level 0 holds whole
L0 files, newest first, whose key ranges overlap. Levels 1 and below never overlap inside a
level and may hold ``4 ** n`` files (L1 4, L2 16, L3 64, ...), as in leveled. Merges keep the
rule that for any key, a shallower level holds a newer entry than a deeper one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..codec.owned import Owns
from ..errors import LeveledError
from ..files.routed import is_foreign
from ..files.sst import SstInfo
from .model import Manifest
from .transitions import require_writer

#: Deepest level a merge may create (leveled has 8 levels, L0..L7).
MAX_LEVEL = 7
#: At L2 and below, this share of merges picks the file with the most tombstones (leveled #311).
TOMBSTONE_PICK_SHARE = 0.25


def max_files(level: int) -> int:
    """How many files level ``level`` (>= 1) may hold before it must merge down."""
    return 4 ** level


@dataclass(frozen=True)
class MergeJob:
    """One merge: ``sources`` leave ``source_level``; with the ``targets`` they overlap in
    ``source_level + 1`` they are rewritten into that level (or just moved, when nothing
    overlaps). ``basement`` says no level below the target holds files, so tombstones and
    expired entries can be dropped. ``owns``: a split shard's run of partitions, whose
    inherited inputs are rewritten without the entries it does not own (never just moved)."""

    source_level: int
    sources: tuple[SstInfo, ...]
    targets: tuple[SstInfo, ...]
    basement: bool
    owns: Owns | None = None

    @property
    def target_level(self) -> int:
        return self.source_level + 1

    @property
    def move_only(self) -> bool:
        return (len(self.sources) == 1 and not self.targets
                and self.foreign_owns(self.sources[0]) is None)

    def foreign_owns(self, sst: SstInfo) -> Owns | None:
        """The run to filter input ``sst`` by: set for a split shard's inherited file."""
        return self.owns if self.owns is not None and is_foreign(sst.name) else None

    @property
    def inputs(self) -> tuple[SstInfo, ...]:
        """Every file read by the merge, newest level first."""
        return self.sources + self.targets


class StaleMergeError(LeveledError):
    """A merge's inputs are no longer all in the manifest (an internal invariant broke)."""


def overlapping(files: tuple[SstInfo, ...], min_key: bytes, max_key: bytes) -> tuple:
    return tuple(f for f in files if f.min_key <= max_key and f.max_key >= min_key)


def _key_range(files) -> tuple[bytes, bytes]:
    return min(f.min_key for f in files), max(f.max_key for f in files)


def _is_basement(levels, target_level: int) -> bool:
    return all(not level for level in levels[target_level + 1 :])


def choose_work(levels: tuple[tuple[SstInfo, ...], ...], rng: random.Random,
                l0_files: int = 1) -> MergeJob | None:
    """The next merge to do, or ``None`` when every level is within its size.

    L0 comes first: once it holds ``l0_files`` files they all merge into L1 together (they
    overlap each other). Then the shallowest level over its size sends one file down: chosen at
    random, or at L2 and below sometimes the file with the most tombstones.
    """
    if len(levels[0]) >= l0_files:
        sources = levels[0]
        lo, hi = _key_range(sources)
        l1 = levels[1] if len(levels) > 1 else ()
        return MergeJob(0, sources, overlapping(l1, lo, hi), _is_basement(levels, 1))
    for n in range(1, min(len(levels), MAX_LEVEL)):
        files = levels[n]
        if len(files) <= max_files(n):
            continue
        if n >= 2 and rng.random() < TOMBSTONE_PICK_SHARE:
            source = max(files, key=lambda f: (f.tombstones, f.name))
        else:
            source = rng.choice(files)
        below = levels[n + 1] if len(levels) > n + 1 else ()
        return MergeJob(n, (source,), overlapping(below, source.min_key, source.max_key),
                        _is_basement(levels, n + 1))
    return None


def merge_due(levels: tuple[tuple[SstInfo, ...], ...], owns: Owns | None) -> bool:
    """Whether a merge is due: what :func:`choose_work`, or for a split shard's child
    :func:`inherited_work`, would give a clerk (whose process need not run until then)."""
    return (choose_work(levels, random.Random(0)) is not None
            or (owns is not None and inherited_work(levels, owns) is not None))


def inherited_work(levels: tuple[tuple[SstInfo, ...], ...], owns: Owns) -> MergeJob | None:
    """For a split shard's child, when no merge is due: its shallowest inherited file goes
    down a level, rewritten without the keys the child does not own, so that in time it
    shares no file with the shard it was split from (and GC detaches it)."""
    for n in range(1, min(len(levels), MAX_LEVEL)):
        for source in levels[n]:
            if is_foreign(source.name):
                below = levels[n + 1] if len(levels) > n + 1 else ()
                return MergeJob(n, (source,), overlapping(below, source.min_key,
                                                          source.max_key),
                                _is_basement(levels, n + 1), owns)
    return None


def apply_merge(manifest: Manifest, epoch: int, job: MergeJob,
                outputs: tuple[SstInfo, ...]) -> Manifest:
    """The manifest change of a finished merge: inputs out, outputs (sorted by key) in."""
    require_writer(manifest, epoch)
    levels = [tuple(level) for level in manifest.levels]
    while len(levels) <= job.target_level:
        levels.append(())
    src, dst = job.source_level, job.target_level
    gone = {f.name for f in job.inputs}
    present = {f.name for f in levels[src]} | {f.name for f in levels[dst]}
    out_names = {f.name for f in outputs}
    if (outputs and out_names <= {f.name for f in levels[dst]}
            and {f.name for f in manifest.sst_files()}.isdisjoint(gone - out_names)):
        return manifest  # an earlier attempt landed
    if not gone <= present:
        raise StaleMergeError(f"merge inputs left the manifest: {sorted(gone - present)[:3]}")
    levels[src] = tuple(f for f in levels[src] if f.name not in gone)
    kept = tuple(f for f in levels[dst] if f.name not in gone)
    levels[dst] = tuple(sorted(kept + tuple(outputs), key=lambda f: f.min_key))
    check_level(levels[dst], dst)
    while len(levels) > 1 and not levels[-1]:
        levels.pop()
    return manifest.with_changes(levels=tuple(levels))


def check_level(files: tuple[SstInfo, ...], level: int) -> None:
    """Levels 1 and below must be sorted and never overlap."""
    if level == 0:
        return
    for a, b in zip(files, files[1:]):
        if a.max_key >= b.min_key:
            raise StaleMergeError(f"L{level} files {a.name} and {b.name} overlap")


def removed_files(before: Manifest, after: Manifest) -> list[SstInfo]:
    """SSTs in ``before`` that ``after`` no longer has."""
    kept = {f.name for f in after.sst_files()}
    return [f for f in before.sst_files() if f.name not in kept]
