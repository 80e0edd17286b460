"""The tictac tree a store keeps as writes land (leveled's ``aae_treecache``), as pure rules.

The Penciller keeps the tree of its Ledger's files: every L0 flush XORs out the entry each
flushed key had in the files before (looked up, batched, in the files) and XORs in the flushed
one (:func:`delta`). Merges change no object, so they leave the tree as it is. A compare then
starts from the kept tree instead of folding the store (:mod:`leveled_ray.admin.compare`).

What a kept tree holds is what a compare folds, with one exception: the live objects, by key
and value hash, less leveled-ray's own (:data:`REPLICATION_BUCKET`), and less every object
with a TTL. An expiring object leaves a fold's tree when its time passes, with no write to
tell the kept one: so objects with a TTL never enter a kept tree, and a tree that has met one
says so (``has_ttl``). A compare does not use such a tree; it folds that side instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .entries import ACTIVE
from .keys import TAG_OBJECT, object_key
from .tictac import TicTacTree, tree_key, tree_key_hashes

#: The bucket where a replica keeps its replicator's positions (:mod:`leveled_ray.replication`):
#: leveled-ray's own, left out of trees and compares.
REPLICATION_BUCKET = "leveled-ray.replication"
#: Its objects' tree keys start so.
_OWN_PREFIX = tree_key(object_key(REPLICATION_BUCKET, ""))[:-1]


def counted(keys: list[bytes], status, expiry) -> tuple[np.ndarray, bool]:
    """Which Ledger rows a kept tree counts (a boolean mask): live objects without a TTL, not
    leveled-ray's own; and whether any live object among them has a TTL."""
    status, expiry = np.asarray(status), np.asarray(expiry)
    live = status == ACTIVE
    ttl = live & (expiry != 0)
    objects = np.fromiter((k[:1] == TAG_OBJECT and not tree_key(k).startswith(_OWN_PREFIX)
                           for k in keys), dtype=bool, count=len(keys))
    return live & ~ttl & objects, bool((ttl & objects).any())


def add_rows(tree: TicTacTree, rows: pa.Table) -> bool:
    """XOR the counted rows of a table of Ledger rows (``key``, ``status``, ``expiry``,
    ``hash``) into ``tree`` (or out again); returns whether a row had a TTL."""
    keys = rows.column("key").to_pylist()
    mask, has_ttl = counted(keys, rows.column("status").to_numpy(),
                            rows.column("expiry").to_numpy())
    if mask.any():
        kept = [k for k, m in zip(keys, mask) if m]
        tree.add_hashes(tree_key_hashes(kept),
                        rows.column("hash").to_numpy().astype(np.uint64)[mask])
    return has_ttl


def add_entries(tree: TicTacTree, keys: list[bytes], entries: list[tuple | None]) -> bool:
    """:func:`add_rows` for Ledger entries (``(sqn, status, expiry, hash, ...)`` or ``None``)
    of ``keys``."""
    present = [(k, e) for k, e in zip(keys, entries) if e is not None]
    if not present:
        return False
    return add_rows(tree, pa.table({
        "key": pa.array([k for k, _ in present], pa.binary()),
        "status": pa.array([e[1] for _, e in present], pa.uint8()),
        "expiry": pa.array([e[2] for _, e in present], pa.uint32()),
        "hash": pa.array([e[3] for _, e in present], pa.uint64())}))


def delta(size: str, flushed: pa.Table, before: list[tuple | None]) -> tuple[TicTacTree, bool]:
    """What a flush of ``flushed`` (sorted, one row per key) changes in a kept tree, given
    each key's newest entry in the files before it (``before``): the old entries XORed out,
    the new ones in. Returns the change, as a tree to XOR in, and whether a flushed row had a
    TTL."""
    change = TicTacTree(size)
    add_entries(change, flushed.column("key").to_pylist(), before)
    return change, add_rows(change, flushed)
