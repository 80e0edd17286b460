"""The figures ``store.stats()`` returns: the Bookie's own, and those of the actors it runs."""

from __future__ import annotations

from .metrics import write_amplification
from .remote import process_stats


def bookie_stats(bookie, inker: dict, penciller: dict, merges: dict, compaction: dict) -> dict:
    """One dict of a running store's figures (``bookie`` is a
    :class:`~leveled_ray.actors.bookie.Bookie`; the others are its actors' ``stats()``)."""
    view, cache, options = bookie.view, bookie.cache, bookie.options
    writes, writer = bookie.writes, bookie.writes.writer
    stats = {
        "url": bookie.url,
        "name": bookie.name,
        "shard": None if bookie.shard is None else bookie.shard[1],
        "head_only": bookie.head_only,
        "epoch": bookie.epoch,
        "next_sqn": writes.next_sqn,
        "durable_sqn": writes.durable_sqn,
        "cache_keys": len(cache.entries),
        "backlog": {"unpersisted": cache.backlog,
                    "limit": options.ledger.max_unpersisted_keys,
                    "l0_memory_keys": penciller.get("l0_memory_keys", 0),
                    "l0_files": penciller.get("l0_files", 0),
                    "throttled_writes": writes.counters["throttled_writes"],
                    "throttle_ms": writes.counters["throttle_ms"]},
        "pending_keys": len(cache.pending),
        "queued_groups": len(writer.queue),
        "unpushed_keys": len(cache.unpushed),
        "ledger_files": view.files.file_count,
        "journal_files": len(view.journal),
        "file_cache": {"bytes": view.host.cache.used, "items": len(view.host.cache),
                       "hits": view.host.cache.hits, "misses": view.host.cache.misses},
        "disk_cache": view.host.disk.cache.stats() if view.host.disk else None,
        "value_cache": {"bytes": view.values.used, "items": len(view.values),
                        "hits": view.values.hits, "misses": view.values.misses},
        "clerks": view.host.states(),
        "latency_ms": {op: {p: round(v * 1000, 3) for p, v in
                            bookie.observed.percentiles(f"leveled_{op}_latency_seconds").items()}
                       for op in ("put", "get")},
        "write_amplification": 0.0,
        **bookie.counters,
        **writes.counters,
        **writer.counters,
        **view.counters,
        **bookie.reaper.counters,
        **(bookie.participant.counters if bookie.participant else {}),
        "txn_prepared_now": len(bookie.participant.parts) if bookie.participant else 0,
        "lease": bookie.lease.stats() if bookie.lease else {},
        "history": history_stats(bookie),
        "io": bookie.store.stats.as_dict(),
        "process": process_stats(),
        "opened": bookie.opened,
        "background_errors": bookie.tasks.errors,
        "last_error": bookie.tasks.last_error,
        "in_doubt": bool(writer.in_doubt),
        "inker": inker,
        "penciller": penciller,
        "merges": merges,
        "compaction": compaction,
        "state": "closed" if bookie.closed else ("broken" if bookie.broken else "open"),
    }
    stats["write_amplification"] = round(write_amplification(stats), 3)
    return stats


def history_stats(bookie) -> dict:
    """Where history begins, who holds it (as the Inker last read the manifest), and the
    changes kept in memory for listeners."""
    manifest = bookie.inker.latest.manifest
    return {"history_sqn": bookie.view.history_sqn,
            "history_s": bookie.options.history_s, "window_sqn": bookie.inker.window_sqn,
            "leases": {h.name: h.sqn for h in manifest.leases if h.expires_at > bookie.clock()},
            "tail": bookie.writes.tail.stats()}
