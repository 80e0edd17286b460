"""The Penciller's kept tictac tree (:mod:`leveled_ray.codec.kept_tree` has the rules).

It is the tree of the Ledger's files: each L0 flush changes it by what it flushes, looked up
against the files it joins; merges leave it as it is. At close it is saved
(``ledger/<ulid>.tree``, named by the manifest's ``tree``), and an open loads it when it is
still the Ledger's. Otherwise (a crash, a bulk write, a new child of a split) it is rebuilt by
a fold of the files in the background, while flushes gather their changes to add to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np

from ..codec import kept_tree
from ..codec.tictac import SIZES, TREE_KEYS, TicTacTree, tree_key_hashes
from ..errors import LeveledError
from ..files.clerk import ClerkHost
from ..files.names import LEDGER_PREFIX, ulid
from ..files.store import ObjectStore
from ..manifest.model import KeptTree, Manifest
from ..options import Options
from ..read.point_in_time import PointInTime
from ..read.scan import scan
from ..read.views import LedgerFiles, ledger_entries

log = logging.getLogger(__name__)

#: Past the last Ledger key: every key starts with a tag byte below it.
_END = b"\xff"
#: The longest wait before a failed fold is tried again (it doubles from half a second).
FOLD_RETRY_MAX_S = 30.0


class TreeKeeper:
    """Keeps the tree (``size``; nothing when ``options.ledger.tree_size`` is ``"off"``)."""

    def __init__(self, store: ObjectStore, options: Options,
                 files: Callable[[], LedgerFiles]):
        self.store, self.options, self._files = store, options, files
        self.size = None if options.ledger.tree_size == "off" else options.ledger.tree_size
        self.tree: TicTacTree | None = None  # None: off, or being rebuilt
        self.has_ttl = False
        #: While it is rebuilt: the flushes' changes since the files it folds.
        self._pending: TicTacTree | None = None
        self._rebuild: asyncio.Task | None = None
        self.host: ClerkHost | None = None  # the reads' files stay while they are read
        #: Moves on each rebuild: a flush's change looked up before it belongs to no tree.
        self._epoch = 0
        self.counters = {"tree_rebuilds": 0, "tree_loads": 0, "tree_saves": 0,
                         "tree_failures": 0, "tree_upkeep_s": 0.0}
        self._failed_folds = 0  # in a row: the next fold waits longer

    def _host(self) -> ClerkHost:
        if self.host is None:
            self.host = ClerkHost(self.store, self.options.cache_size // 8)
        return self.host

    async def open(self, manifest: Manifest) -> None:
        """Start from the saved tree if it is still the Ledger's, else from a fold."""
        if self.size is None:
            return
        saved = manifest.kept_tree()
        if not any(self._files().levels):
            self.tree = TicTacTree(self.size)
            return
        if saved is not None and saved.size == self.size:
            try:
                self.tree = TicTacTree.decode(await self.store.get_async(saved.name))
                self.has_ttl = saved.has_ttl
                self.counters["tree_loads"] += 1
                return
            except LeveledError:  # gone or damaged: fold it again
                log.warning("the saved tree %s could not be read", saved.name, exc_info=True)
        self.rebuild()

    def rebuild(self) -> None:
        """Fold the Ledger's files into a new tree in the background (after a bulk write,
        whose files join the Ledger as they are); flushes meanwhile gather their changes."""
        if self.size is None:
            return
        if self._rebuild is not None:
            self._rebuild.cancel()
        self._epoch += 1
        self.tree, self._pending, self.has_ttl = None, TicTacTree(self.size), False
        self._rebuild = asyncio.get_running_loop().create_task(self._fold(self._files()))

    async def _fold(self, files: LedgerFiles) -> None:
        tree, has_ttl = TicTacTree(self.size), False
        view = PointInTime("", self.options, files, [], [], 0, store=self.store,
                           host=self._host())
        try:
            with self._host().reading(files.version):
                async for rows in scan(view, b"", _END, live=False):
                    has_ttl |= kept_tree.add_rows(tree, rows)
        except Exception:  # noqa: BLE001 - compares fold meanwhile; this folds again later
            self.counters["tree_failures"] += 1
            self._failed_folds += 1
            log.warning("the kept tree could not be rebuilt", exc_info=True)
            await asyncio.sleep(min(FOLD_RETRY_MAX_S, 0.5 * 2 ** self._failed_folds))
            self._rebuild = None
            self.rebuild()  # of the files then
            return
        self._failed_folds = 0
        tree.leaves ^= self._pending.leaves
        self.tree, self._pending = tree, None
        self.has_ttl |= has_ttl
        self._rebuild = None
        self.counters["tree_rebuilds"] += 1

    async def key_hashes(self, flushed) -> np.ndarray | None:
        """The tree key hashes of the rows a flush writes, made in a thread (``None`` when
        trees are off): the flush's SST keeps their top bits as segment hints, and
        :meth:`change_of` uses them."""
        if self.size is None:
            return None
        return await asyncio.to_thread(tree_key_hashes, flushed.column("key").to_pylist())

    async def change_of(self, flushed, files: LedgerFiles,
                        tree_hashes: np.ndarray | None = None) -> tuple | None:
        """What flushing ``flushed`` (sorted Ledger rows, one per key; ``tree_hashes``, their
        :meth:`key_hashes`) into ``files`` changes, for :meth:`apply`: the keys' entries
        before it are looked up in the files, together. ``None`` when trees are off. Its
        seconds are counted in ``tree_upkeep_s``."""
        if self.size is None:
            return None
        started = time.perf_counter()
        epoch, keys = self._epoch, flushed.column("key").to_pylist()
        try:
            with self._host().reading(files.version):
                before = await ledger_entries(self._host(), files, keys, {})
        except LeveledError:
            self.counters["tree_failures"] += 1
            log.warning("a flush's earlier entries could not be read", exc_info=True)
            return (None, epoch)
        found = kept_tree.delta(flushed, before, tree_hashes)
        self.counters["tree_upkeep_s"] += time.perf_counter() - started
        return (found, epoch)

    def apply(self, change: tuple | None) -> None:
        """Add a committed flush's change. One not known (its lookups failed, or a rebuild
        began since they ran) folds the files again."""
        if change is None:
            return
        found, epoch = change
        if found is None or epoch != self._epoch:
            self.rebuild()
            return
        delta, has_ttl = found
        self.has_ttl |= has_ttl
        target = self.tree if self.tree is not None else self._pending
        if target is not None:
            delta.xor_into(target)

    def current(self, size: str) -> TicTacTree | None:
        """The tree (not a copy: it changes in place at each flush), if a compare with trees
        of ``size`` may start from it: kept (not off, not being rebuilt), no smaller than
        ``size``, and of no object with a TTL."""
        if self.tree is None or self.has_ttl or SIZES[size] > SIZES[self.tree.size]:
            return None
        return self.tree

    async def save(self, manifest: Manifest) -> KeptTree | None:
        """Write the tree for ``manifest`` (the Ledger at close); returns what to record."""
        if self.tree is None:
            return None
        # Taken in this step, with ``manifest``: the tree may change (or go) while it uploads.
        saved = KeptTree(f"{LEDGER_PREFIX}{ulid()}.tree", self.tree.size, manifest.store_id,
                         manifest.ledger_sqn, self.has_ttl, TREE_KEYS)
        await self.store.put_async(saved.name, self.tree.encode())
        self.counters["tree_saves"] += 1
        return saved

    def close(self) -> None:
        if self._rebuild is not None:
            self._rebuild.cancel()

    def stats(self) -> dict:
        state = ("off" if self.size is None else "rebuilding" if self._rebuild is not None
                 else "kept" if self.tree is not None else "unknown")
        return {"tree": state, "tree_size": self.size, "tree_has_ttl": self.has_ttl,
                **self.counters}
