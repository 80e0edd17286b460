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


def add_rows(tree: TicTacTree, rows: pa.Table) -> bool:
    """XOR the counted rows of a table of Ledger rows (``key``, ``status``, ``expiry``,
    ``hash``) into ``tree`` (or out again); returns whether a row had a TTL."""
    keys = rows.column("key").combine_chunks()
    mask, has_ttl = counted(keys, rows.column("status").to_numpy(),
                            rows.column("expiry").to_numpy())
    if mask.any():
        tree.add_hashes(tree_key_hashes(keys.filter(pa.array(mask)).to_pylist()),
                        rows.column("hash").to_numpy().astype(np.uint64)[mask])
    return has_ttl


class TreeChange:
    """What a flush changes in a kept tree, kept sparse: the key and value hashes to XOR in
    (a ``large`` tree is 4 MiB, and a flush touches a few thousand of its segments)."""

    __slots__ = ("_keys", "_values")

    def __init__(self):
        self._keys: list[np.ndarray] = []
        self._values: list[np.ndarray] = []

    def add_hashes(self, khashes: np.ndarray, value_hashes: np.ndarray) -> None:
        self._keys.append(np.asarray(khashes, dtype=np.uint64))
        self._values.append(np.asarray(value_hashes, dtype=np.uint64))

    def xor_into(self, tree: TicTacTree) -> None:
        if self._keys:
            tree.add_hashes(np.concatenate(self._keys), np.concatenate(self._values))


def delta(flushed: pa.Table, before: list[tuple | None],
          tree_hashes: np.ndarray | None = None) -> tuple[TreeChange, bool]:
    """What a flush of ``flushed`` (sorted, one row per key) changes in a kept tree, given
    each key's newest entry in the files before it (``before``: ``(sqn, status, expiry, hash,
    ...)`` or ``None``): the old entries XORed out, the new ones in. Returns the change, and
    whether a flushed row had a TTL. Each key is hashed once, for both, unless the caller
    has every row's :func:`~.tictac.tree_key_hashes` (``tree_hashes``)."""
    keys = flushed.column("key").combine_chunks()
    old = np.asarray([i for i, e in enumerate(before) if e is not None], dtype=np.int64)
    n = len(old)
    old_hash = np.fromiter((before[i][3] for i in old), np.uint64, n)
    old_mask, _ = counted(keys.take(pa.array(old, pa.int64())),
                          np.fromiter((before[i][1] for i in old), np.uint8, n),
                          np.fromiter((before[i][2] for i in old), np.uint32, n))
    new_mask, has_ttl = counted(keys, flushed.column("status").to_numpy(),
                                flushed.column("expiry").to_numpy())
    khashes = tree_hashes
    if khashes is None:  # hash the keys counted old or new only
        hashed = new_mask.copy()
        hashed[old[old_mask]] = True
        where = np.flatnonzero(hashed)
        khashes = np.zeros(len(keys), dtype=np.uint64)
        khashes[where] = tree_key_hashes(keys.take(pa.array(where, pa.int64())).to_pylist())
    change = TreeChange()
    change.add_hashes(khashes[old[old_mask]], old_hash[old_mask])
    change.add_hashes(khashes[new_mask], flushed.column("hash").to_numpy().astype(
        np.uint64)[new_mask])
    return change, has_ttl
