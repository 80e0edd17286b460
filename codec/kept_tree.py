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
import pyarrow.compute as pc

from .entries import ACTIVE
from .keys import TAG_OBJECT, object_key
from .tictac import TicTacTree, tree_key_hashes

#: The bucket where a replica keeps its replicator's positions (:mod:`leveled_ray.replication`):
#: leveled-ray's own, left out of trees and compares.
REPLICATION_BUCKET = "leveled-ray.replication"
#: How its objects' Ledger keys start (the bucket named as ``bytes``, then as ``str``).
_OWN_PREFIXES = tuple(object_key(bucket, "")[:len(REPLICATION_BUCKET) + 3].decode()
                      for bucket in (REPLICATION_BUCKET.encode(), REPLICATION_BUCKET))


def counted(keys: pa.Array, status, expiry) -> tuple[np.ndarray, bool]:
    """Which Ledger rows a kept tree counts (a boolean mask): live objects without a TTL, not
    leveled-ray's own; and whether any live object among them has a TTL."""
    status, expiry = np.asarray(status), np.asarray(expiry)
    objects = pc.starts_with(keys, pattern=TAG_OBJECT.decode())
    for own in _OWN_PREFIXES:
        objects = pc.and_(objects, pc.invert(pc.starts_with(keys, pattern=own)))
    objects = objects.to_numpy(zero_copy_only=False)
    live = status == ACTIVE
    ttl = live & (expiry != 0)
    return live & ~ttl & objects, bool((ttl & objects).any())


def _add(tree: TicTacTree, keys: pa.Array, status, expiry, hashes) -> bool:
    mask, has_ttl = counted(keys, status, expiry)
    if mask.any():
        tree.add_hashes(tree_key_hashes(keys.filter(pa.array(mask)).to_pylist()),
                        np.asarray(hashes, dtype=np.uint64)[mask])
    return has_ttl


def add_rows(tree: TicTacTree, rows: pa.Table) -> bool:
    """XOR the counted rows of a table of Ledger rows (``key``, ``status``, ``expiry``,
    ``hash``) into ``tree`` (or out again); returns whether a row had a TTL."""
    return _add(tree, rows.column("key").combine_chunks(), rows.column("status").to_numpy(),
                rows.column("expiry").to_numpy(), rows.column("hash").to_numpy())


def add_entries(tree: TicTacTree, keys: pa.Array, entries: list[tuple | None]) -> bool:
    """:func:`add_rows` for Ledger entries (``(sqn, status, expiry, hash, ...)`` or ``None``)
    of ``keys``."""
    present = [i for i, e in enumerate(entries) if e is not None]
    if not present:
        return False
    n = len(present)
    return _add(tree, keys.take(pa.array(present, pa.int64())),
                np.fromiter((entries[i][1] for i in present), np.uint8, n),
                np.fromiter((entries[i][2] for i in present), np.uint32, n),
                np.fromiter((entries[i][3] for i in present), np.uint64, n))


def delta(size: str, flushed: pa.Table, before: list[tuple | None]) -> tuple[TicTacTree, bool]:
    """What a flush of ``flushed`` (sorted, one row per key) changes in a kept tree, given
    each key's newest entry in the files before it (``before``): the old entries XORed out,
    the new ones in. Returns the change, as a tree to XOR in, and whether a flushed row had a
    TTL."""
    change = TicTacTree(size)
    add_entries(change, flushed.column("key").combine_chunks(), before)
    return change, add_rows(change, flushed)
