"""A warm start: a Bookie opened on a node loads, from the node's disk cache, what the store's
last Bookie there held in memory.

The Bookie keeps a *hot list* in the disk cache, as a note of its store: which footers and
blocks its memory cache holds, and which values (by SQN) its value cache holds, the least
recently used first (saved every :data:`HOT_LIST_S` and at a clean close; a kill loses what
changed since the last save). An open on the node (a reopen, Ray's restart of the Bookie's
process) reads the list and loads into memory, decoded and with their entry indexes built, the
blocks of it that the disk cache holds and that belong to files the store still lists, the
most recently used first, until the memory cache is nearly full; then the listed values that
those blocks hold: InnoDB's buffer pool dump and load. It begins once the open has read the
manifest, beside the open's own requests; the open waits for it up to ``disk_cache.warm_s``
and lets the rest go on in the background.

A warm start asks the object store for nothing: footers and blocks come from the disk cache
or not at all (:data:`~.file_clerk.DISK_ONLY`), so it costs an open no request. A list that is
missing, damaged or of another format, a footer or block the disk cache lost or that fails its
checksum, a file gone: each is a miss, counted, and the read that wants it goes to the object
store as on a cold start. The counts are the disk cache's (``stats()["disk_cache"]``):
``warmed`` blocks, ``warmed_values``, ``warm_misses`` (blocks listed that the disk cache
lacked, with their footer or alone) and ``warm_errors`` (a file whose footer or block on disk
was damaged).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import LeveledError
from .clerk import ClerkHost
from .file_clerk import DISK_ONLY, FileState, NotOnDisk
from .journal import JournalInfo
from .lru import LruCache
from .sst import SstInfo

#: The note's label in the disk cache, and its format.
HOT_LIST = "hot-list"
FORMAT = 1
#: How often a running Bookie saves its hot list.
HOT_LIST_S = 30.0
#: Most entries a list keeps (the most recently used).
MAX_ENTRIES = 100_000
#: A warm start stops once the memory cache holds this share of its budget (what reads
#: loaded meanwhile is not pushed out for it).
FULL = 0.9
#: How long a close waits for the disk cache to take its hot list.
FLUSH_S = 2.0
#: A footer's entry in the list, in place of a block number.
FOOTER = -1


def hot_entries(cache: LruCache, live: Callable[[str], bool] = lambda name: True
                ) -> list[tuple[str, int]]:
    """The footers (:data:`FOOTER`) and blocks (their number) of files that ``cache`` holds
    and that are ``live``, the least recently used first; at most :data:`MAX_ENTRIES`, the
    most recent."""
    out = []
    for key in cache.held_keys():
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                and live(key[0])):
            continue
        name, part = key
        if part == "footer":
            out.append((name, FOOTER))
        elif isinstance(part, tuple) and len(part) == 2 and part[0] == "block":
            out.append((name, int(part[1])))
    return out[-MAX_ENTRIES:]


class HotList(NamedTuple):
    """What a Bookie's memory held: footers and blocks (``(file, block or FOOTER)``) and the
    SQNs of the values it kept, each the least recently used first."""

    blocks: list[tuple[str, int]]
    values: list[int]


def hot_list(host: ClerkHost, values: LruCache | None) -> HotList:
    """What ``host`` and the value cache ``values`` hold, of files still read (not those a
    merge or a compaction replaced, which wait for their delete)."""
    def live(name: str) -> bool:
        clerk = host.clerks.get(name)
        return clerk is None or clerk.state is FileState.READING

    return HotList(hot_entries(host.cache, live), [] if values is None else
                   [sqn for sqn in values.held_keys() if isinstance(sqn, int)][-MAX_ENTRIES:])


def encode(hot: HotList) -> bytes:
    return json.dumps({"format": FORMAT, "blocks": hot.blocks, "values": hot.values}).encode()


def decode(data: bytes | None) -> HotList:
    """A saved list; an empty one for a list that is missing or not one."""
    try:
        doc = json.loads(data) if data else None
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            return HotList([(name, part) for name, part in doc["blocks"]
                            if isinstance(name, str) and isinstance(part, int)],
                           [sqn for sqn in doc["values"] if isinstance(sqn, int) and sqn > 0])
    except (ValueError, TypeError, KeyError):
        pass
    return HotList([], [])


def save(host: ClerkHost, values: LruCache | None = None) -> None:
    """Keep the hot list of ``host`` (and of the value cache ``values``) in the node's disk
    cache (in the background)."""
    if host.disk is not None:
        host.disk.put_note(HOT_LIST, encode(hot_list(host, values)))


async def save_now(host: ClerkHost, values: LruCache | None = None,
                   timeout_s: float = FLUSH_S) -> None:
    """:func:`save`, and wait (up to ``timeout_s``) until the disk cache has it and every
    write queued before it: at a close, before the process ends."""
    if host.disk is not None:
        save(host, values)
        await asyncio.to_thread(host.disk.cache.flush, timeout_s)


async def keep_saving(host: ClerkHost, values: LruCache | None = None,
                      every_s: float = HOT_LIST_S) -> None:
    """:func:`save` every ``every_s`` seconds, for ever (a Bookie's loop)."""
    while True:
        await asyncio.sleep(every_s)
        save(host, values)


async def warm(host: ClerkHost, ssts: Iterable[SstInfo], journal: Iterable[JournalInfo],
               values: LruCache | None = None) -> int:
    """Load the saved hot list's blocks of the files ``ssts`` and ``journal`` (what the
    store lists now) from the node's disk cache into the host's cache, and the values it
    lists that those blocks hold into ``values``; how many blocks. Never raises for the
    cache's or a file's sake: see the module docstring."""
    disk = host.disk
    if disk is None:
        return 0
    DISK_ONLY.set(True)  # in this task alone: it asks the object store for nothing
    hot = decode(await disk.get_note(HOT_LIST))
    journal = list(journal)
    loaded = await _blocks(host, hot.blocks, ssts, journal)
    if values is not None and hot.values:
        await _values(host, hot.values, journal, values)
    return loaded


async def _blocks(host: ClerkHost, entries: list[tuple[str, int]], ssts: Iterable[SstInfo],
                  journal: list[JournalInfo]) -> int:
    counters = host.disk.cache.counters  # type: ignore[union-attr]
    by_file: dict[str, list[int]] = {}
    for name, part in reversed(entries):
        by_file.setdefault(name, []).append(part)  # the most recently used first
    files = {f.name: (host.sst, f) for f in ssts} | {f.name: (host.journal, f) for f in journal}
    loaded = 0
    for name, parts in by_file.items():
        if host.cache.used >= FULL * host.cache.budget:
            break
        listed = files.get(name)
        if listed is None:  # replaced since the list was saved
            continue
        clerk_of, info = listed
        blocks = [part for part in parts if part != FOOTER]
        try:
            found, missing = await clerk_of(info).warm(blocks, FULL)  # type: ignore[operator]
        except NotOnDisk:  # its footer: read on demand instead
            counters["warm_misses"] += len(set(blocks))
            continue
        except LeveledError as exc:  # damaged, gone: read on demand instead
            _failed(counters, exc)
            continue
        loaded += found
        counters["warmed"] += found
        counters["warm_misses"] += missing
    return loaded


async def _values(host: ClerkHost, sqns: list[int], journal: list[JournalInfo],
                  values: LruCache) -> None:
    """Put the values of ``sqns`` that the blocks in the host's cache hold into ``values``."""
    counters = host.disk.cache.counters  # type: ignore[union-attr]
    wanted = np.unique(np.asarray(sqns, dtype=np.uint64))
    for info in journal:
        if values.used >= FULL * values.budget:
            return
        picked = wanted[(wanted >= info.min_sqn) & (wanted <= info.max_sqn)]
        if not len(picked) or (info.name, "footer") not in host.cache:
            continue
        clerk = host.journal(info)
        try:
            footer = await clerk.footer()
            at = footer.positions(picked)
            rows = at[at >= 0]
            held = np.asarray([(info.name, ("block", int(b))) in host.cache
                               for b in footer.blocks_of(rows)], dtype=bool)
            if not held.any():
                continue
            table, where = await clerk.blocks_holding(rows[held], keep=True)
        except NotOnDisk:  # a block pushed out of memory meanwhile, and off the disk since
            continue
        except LeveledError as exc:
            _failed(counters, exc)
            continue
        found = table.column("value").take(pa.array(where)).to_pylist()
        for sqn, value in zip(picked[at >= 0][held].tolist(), found):
            values.put(sqn, value, len(value) + 64)
        counters["warmed_values"] += len(found)


def _failed(counters, exc: LeveledError) -> None:
    counters["warm_errors"] += 1
    counters[f"warm_error {type(exc).__name__}"] += 1
