"""Bulk ingestion: installing files a bulk write built outside the store's writer.

A bulk write (the Spark writer, :mod:`leveled_ray.bulk.write`) builds journal files and Ledger
SSTs itself, with SQNs from a reserved window above every SQN the store had given out, and
installs them with one manifest change: all of them become visible at once, or none do.
As RocksDB's external file ingestion does, each SST goes as deep into the Ledger's levels as
its key range allows, so a large load costs no merges on the way in.

Every function here is pure: the CAS loop calls :func:`ingest` again on the newest manifest
after a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import LeveledError
from ..files.journal import JournalInfo
from ..files.sst import SstInfo
from .levels import MAX_LEVEL, max_files, overlapping
from .model import Manifest
from .transitions import require_writer

#: SQNs a bulk write leaves for the store's own writes while it runs: its window starts this
#: far above the store's next SQN, and its commit is refused if the store got there first.
SQN_GAP = 1 << 32
#: SQNs each partition of a bulk write may use (so partitions need not coordinate).
PARTITION_SQNS = 1 << 28
#: Partitions one bulk write may have.
MAX_PARTITIONS = 1 << 14
#: SQNs one bulk write reserves: the next one starts above them.
WINDOW_SQNS = PARTITION_SQNS * MAX_PARTITIONS
#: SQNs are kept as unsigned 64-bit numbers, but stay below 2**63 for every reader.
MAX_SQN = (1 << 63) - 1


class IngestConflictError(LeveledError):
    """A bulk write could not be installed, and nothing of it became visible: the store
    changed in a way its files cannot be placed after (another bulk write or many writes
    landed first, or journal entries are not yet in the Ledger). Its files are orphans that
    garbage collection removes; run the write again."""


def partition_window(base: int, partition: int) -> range:
    """The SQNs partition ``partition`` of the bulk write reserved at ``base`` may use."""
    if not 0 <= partition < MAX_PARTITIONS:
        raise IngestConflictError(f"a bulk write may have at most {MAX_PARTITIONS} partitions "
                                  f"(partition {partition}): repartition the data")
    first = base + partition * PARTITION_SQNS
    return range(first, first + PARTITION_SQNS)


def reserve_base(top_sqn: int, reserved_upto: int = 0) -> int:
    """The first SQN of a new bulk write's window, given the highest SQN the store has given
    out (``top_sqn``) and the end of the windows already reserved."""
    base = max(top_sqn + SQN_GAP, reserved_upto) + 1
    if base + WINDOW_SQNS > MAX_SQN:
        raise IngestConflictError("the store's SQNs are used up for bulk writes")
    return base


def check_install_order(journal: Iterable[JournalInfo], next_sqn: int,
                        installing: int = 0) -> None:
    """A bulk write's files go after every SQN the store gave out (``next_sqn`` is the next);
    else another bulk write landed first. A shard preparing a part also passes
    ``installing``, the first SQN of the highest bulk write whose install has begun: once
    it is in, the store will have given out SQNs above this one's."""
    low = min(j.min_sqn for j in journal)
    if low < next_sqn:
        raise IngestConflictError(
            f"the store gave out SQN {next_sqn - 1} before the bulk write (from SQN {low}) "
            "was installed: another bulk write landed first. Nothing of this one is "
            "installed: run it again")
    if low < installing:
        raise IngestConflictError(
            f"a bulk write begun after this one (from SQN {installing}; this one from SQN "
            f"{low}) is being installed first. Nothing of this one is installed: run it again")


def top_sqn(manifest: Manifest) -> int:
    """The highest SQN the manifest knows of, in the journal or the Ledger."""
    return max([manifest.ledger_sqn, manifest.max_journal_sqn]
               + [f.max_sqn for f in manifest.sst_files()])


def target_level(levels: list[list[SstInfo]], sst: SstInfo, bottom: int) -> int:
    """Where a file newer than every file in ``levels`` may go: just above the first level
    (from L0 down) holding a file whose key range overlaps it, or, when none does,
    ``bottom``. Then for any key, every shallower file holds a newer entry, as merges keep."""
    for n, level in enumerate(levels):
        if overlapping(tuple(level), sst.min_key, sst.max_key):
            return max(n - 1, 0)
    return bottom


def base_level(count: int) -> int:
    """The shallowest level (>= 1) that may hold ``count`` files."""
    n = 1
    while n < MAX_LEVEL and max_files(n) < count:
        n += 1
    return n


def place(levels: tuple[tuple[SstInfo, ...], ...],
          ssts: tuple[SstInfo, ...]) -> tuple[tuple[SstInfo, ...], ...]:
    """The levels with ``ssts`` (newer than every file in ``levels``) added where
    :func:`target_level` allows. They go in oldest first, so that a newer file overlapping
    an older one of the same write lands above it."""
    placed = [list(level) for level in levels]
    deepest = max((n for n, level in enumerate(placed) if level), default=0)
    bottom = min(MAX_LEVEL, max(deepest, base_level(len(ssts))))
    for sst in sorted(ssts, key=lambda f: (f.min_sqn, f.min_key)):
        n = target_level(placed, sst, bottom)
        while len(placed) <= n:
            placed.append([])
        if n == 0:
            placed[0].insert(0, sst)  # L0 is newest first
        else:
            placed[n].append(sst)
            placed[n].sort(key=lambda f: f.min_key)
    return tuple(tuple(level) for level in placed)


def applied(manifest: Manifest, mark: tuple[str, int] | None) -> bool:
    """Whether streaming writer ``mark[0]`` has applied batch ``mark[1]`` (or a later one)."""
    return mark is not None and dict(manifest.stream_batches).get(mark[0], -1) >= mark[1]


def ingest(manifest: Manifest, epoch: int, journal: tuple[JournalInfo, ...],
           ssts: tuple[SstInfo, ...], mark: tuple[str, int] | None = None) -> Manifest:
    """Install a bulk write's journal files and SSTs, and move the persisted SQN past them.

    Refused (:class:`IngestConflictError`) unless every SQN of the write is above every SQN
    the store holds and every journal entry is already in the Ledger: then the new files are
    the newest of the store, and the persisted SQN may move past them. Installing the same
    files twice changes nothing. ``mark`` (``(writer, batch id)``, a streaming write's) is
    recorded with the files; a batch the writer applied already changes nothing."""
    require_writer(manifest, epoch)
    present = {j.name for j in manifest.journal}
    if not journal or all(j.name in present for j in journal) or applied(manifest, mark):
        return manifest
    low = min(j.min_sqn for j in journal)
    high = max(j.max_sqn for j in journal)
    if ssts and (min(s.min_sqn for s in ssts) < low or max(s.max_sqn for s in ssts) > high):
        raise IngestConflictError("the SSTs hold SQNs outside the write's journal files")
    if low <= top_sqn(manifest):
        raise IngestConflictError(
            f"the store reached SQN {top_sqn(manifest)} before the bulk write (from SQN {low}) "
            f"was installed: another bulk write or {SQN_GAP} writes landed first")
    if manifest.ledger_sqn < manifest.max_journal_sqn:
        raise IngestConflictError(
            f"journal entries after SQN {manifest.ledger_sqn} are not in the Ledger yet: open "
            f"the store once (it replays them), or write through its running Bookie")
    marks = manifest.stream_batches
    if mark is not None:
        marks = tuple(kv for kv in marks if kv[0] != mark[0]) + (tuple(mark),)
    return manifest.with_changes(
        journal=manifest.journal + tuple(sorted(journal, key=lambda j: j.min_sqn)),
        levels=place(manifest.levels, ssts),
        ledger_sqn=high,
        stream_batches=marks,
    )
