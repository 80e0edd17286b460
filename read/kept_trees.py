"""A point in time's tictac tree from a kept one (:mod:`leveled_ray.codec.kept_tree`), so that a
compare need not fold the store: the tree of its Ledger files, kept by the running Penciller or
saved at close, changed by the entries newer than those files (a Bookie's cache, a reader's
replay of the journal)."""

from __future__ import annotations

import pyarrow as pa

from ..codec import kept_tree
from ..codec.tictac import SIZES, TicTacTree
from ..errors import LeveledError
from ..files.clerk import ClerkHost
from ..files.sst import sort_and_dedupe
from .views import LedgerFiles, ledger_entries


async def with_newer(tree: TicTacTree, host: ClerkHost, files: LedgerFiles,
                     newer: pa.Table, size: str) -> TicTacTree | None:
    """``tree`` (of ``files``) changed by ``newer`` (Ledger rows not in the files, or in them
    already: the change is then nothing), as a tree of ``size``; ``None`` if a newer row has a
    TTL (see the rules). ``tree`` is not changed, but may be what is returned."""
    if newer.num_rows:
        tree = TicTacTree(tree.size, tree.leaves.copy())  # the caller's tree stays as it is
        newer = sort_and_dedupe(newer)
        keys = newer.column("key").to_pylist()
        with host.reading(files.version):
            before = await ledger_entries(host, files, keys, {})
        change, has_ttl = kept_tree.delta(newer, before)
        if has_ttl:
            return None
        change.xor_into(tree)
    return tree.resized(size)


async def saved_tree(view, size: str) -> TicTacTree | None:
    """``view``'s tree (a :class:`~leveled_ray.read.point_in_time.PointInTime`) from the tree
    saved of its files, if there is one it may use; ``None`` where it must be folded: no saved
    tree of these files, one smaller than ``size`` or of objects with a TTL, a view of a past
    time, or a saved tree that cannot be read."""
    saved = view.files.tree
    if (saved is None or saved.has_ttl or SIZES[size] > SIZES[saved.size]
            or getattr(view, "past", False)):
        return None
    try:
        tree = TicTacTree.decode(await view.store.get_async(saved.name))
    except LeveledError:
        return None
    return await with_newer(tree, view.host, view.files, view.overlay_table()[1], size)


async def view_tree(view, size: str) -> TicTacTree | None:
    """:func:`saved_tree` of a point in time, or of a merged view of shards (the XOR merge of
    their trees: the shards hold disjoint keys); ``None`` if any part has none."""
    parts = getattr(view, "views", None) or [view]
    trees = [await saved_tree(part, size) for part in parts]
    return merged(trees)


def merged(trees: list[TicTacTree | None]) -> TicTacTree | None:
    """The XOR merge of shards' trees, or ``None`` if one is missing."""
    if not trees or any(t is None for t in trees):
        return None
    out = trees[0]
    for tree in trees[1:]:
        out = out.merge(tree)
    return out
