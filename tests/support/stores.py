"""What a store holds, read from outside it: its Ledger's progress, its files and objects."""

from __future__ import annotations

from leveled_ray.files.store import ObjectStore
from leveled_ray.read.store_reader import open_reader


def persisted(store, sqn: int) -> bool:
    """Whether every change up to ``sqn`` is in the Ledger's SSTs."""
    return store.stats()["penciller"]["ledger_sqn"] >= sqn


#: Small Ledger settings, so a test reaches merges and journal compaction quickly.
SMALL = dict(ledger=dict(l0_max_keys=200, push_keys=50, push_ms=5, sst_max_keys=150),
             journal=dict(compaction_interval_s=0))


def current_files(url, options) -> set[str]:
    """The Ledger and journal files the newest manifest lists."""
    m = open_reader(url, options).manifest
    return {f.name for level in m.levels for f in level} | {j.name for j in m.journal}


def stored(url, options) -> set[str]:
    """The Ledger and journal objects in the object store."""
    objects = ObjectStore.from_url(url, options)
    return {m.path for prefix in ("ledger/", "journal/") for m in objects.list(prefix)}
