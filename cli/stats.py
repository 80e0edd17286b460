"""``leveled-ray stats``: a store's figures, refreshed in the terminal.

With ``--name`` it asks the running store (``store.stats()``, through Ray) every ``--watch``
seconds and shows rates, latency percentiles, the write backlog, levels, caches, object-store
requests and errors, live snapshots and checkpoints. Without a running store, it shows what
the manifest says. The terminal view is drawn with rich; ``--json`` prints one JSON object
per refresh instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

#: Where each actor's figures are in ``store.stats()`` (the Bookie's at the top).
_ACTORS = (None, "inker", "penciller", "merges", "compaction")


def _io_total(stats: dict, field: str) -> int:
    return sum((stats if key is None else stats.get(key, {})).get("io", {}).get(field, 0)
               for key in _ACTORS)


def _ratio(hits: int, misses: int) -> float | None:
    return round(hits / (hits + misses), 3) if hits + misses else None


def short_node(stats: dict) -> str | None:
    """The first 12 hex digits of the Ray node that runs the Bookie (as ``ray status`` and
    the dashboard show node ids), or ``None`` outside Ray."""
    node = stats.get("process", {}).get("node")
    return node[:12] if node else None


def summarize(now: dict, before: dict | None, seconds: float) -> dict:
    """The figures ``stats`` shows for a running store, from two ``store.stats()`` results
    ``seconds`` apart (rates are ``None`` on the first)."""

    def rate(read: Callable[[dict], float]) -> float | None:
        if before is None or seconds <= 0:
            return None
        return round((read(now) - read(before)) / seconds, 1)

    requests = ("puts", "gets", "heads", "lists", "deletes")
    penciller = now.get("penciller", {})
    return {
        "source": "running store",
        "store": now["url"], "name": now["name"], "state": now["state"],
        "node": short_node(now), "epoch": now["epoch"], "durable_sqn": now["durable_sqn"],
        "rates": {
            "puts/s": rate(lambda s: s["changes"]),
            "gets/s": rate(lambda s: s["gets"]),
            "heads/s": rate(lambda s: s["heads"]),
            "object-store requests/s": rate(lambda s: sum(_io_total(s, f) for f in requests)),
        },
        "latency_ms": now.get("latency_ms", {}),
        "backlog": {"unpersisted": now["backlog"]["unpersisted"],
                    "limit": now["backlog"]["limit"], "queued_groups": now["queued_groups"],
                    "throttled_writes": now["throttled_writes"],
                    "throttle_ms": now["throttle_ms"]},
        "levels": [{"level": i, "files": n, "bytes": b} for i, (n, b) in enumerate(zip(
            penciller.get("level_files", []), penciller.get("level_bytes", [])))],
        "l0_memory_keys": penciller.get("l0_memory_keys", 0),
        "journal_files": now["journal_files"],
        "cache_hit_ratio": {
            "file": _ratio(now["file_cache"]["hits"], now["file_cache"]["misses"]),
            "value": _ratio(now["value_cache"]["hits"], now["value_cache"]["misses"])},
        "object_store": {"requests": sum(_io_total(now, f) for f in requests),
                         "errors": _io_total(now, "errors"),
                         "retries": _io_total(now, "retries"),
                         "hedges": _io_total(now, "hedges")},
        "live_snapshots": penciller.get("snapshots", 0),
        "live_checkpoints": penciller.get("checkpoints", 0),
        "write_amplification": now.get("write_amplification"),
    }


def summarize_shards(now: dict, before: dict | None, seconds: float) -> dict:
    """:func:`summarize` of a sharded store: one row per shard (its rates, backlog and
    files), under the store's totals."""
    rows = {}
    for i, shard in enumerate(now["shards"]):
        one = summarize(shard, None if before is None else before["shards"][i], seconds)
        rows[f"shard {i}"] = {"puts/s": one["rates"]["puts/s"],
                              "gets/s": one["rates"]["gets/s"],
                              "unpersisted": one["backlog"]["unpersisted"],
                              "journal files": one["journal_files"],
                              "cut pause ms": shard["cut_pause_ms_max"],
                              "state": one["state"], "node": one["node"]}
    return {"source": "running sharded store", "store": now["url"], "name": now["name"],
            "shards": rows}


def summarize_manifest(info: dict) -> dict:
    """The figures ``stats`` shows without a running store: what the manifest says (``info``
    is what ``leveled-ray inspect`` gathers)."""
    return {
        "source": "manifest (no running store asked)",
        "store": info["url"], "manifest_id": info["manifest_id"],
        "epoch": info["writer_epoch"], "ledger_sqn": info["ledger_sqn"],
        "max_sqn": info["max_sqn"],
        "levels": [{"level": lv["level"], "files": lv["files"], "bytes": lv["bytes"]}
                   for lv in info["levels"]],
        "journal_files": info["journal"]["files"],
        "journal_bytes": info["journal"]["bytes"],
        "unpersisted_changes": info["unpersisted_changes"],
        "live_checkpoints": info["checkpoints"],
    }


def render(figures: dict, human: Callable[[float], str]) -> Table:
    """A two-column table of the figures; nested sections are indented rows."""
    table = Table(title=f"leveled-ray stats: {figures['store']}", caption=figures["source"],
                  show_header=False, expand=False)
    table.add_column("figure", style="bold")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key in ("store", "source"):
            continue
        if key == "levels":
            for lv in value:
                table.add_row(f"L{lv['level']}", f"{lv['files']} files, {human(lv['bytes'])}")
        elif isinstance(value, dict):
            table.add_row(key, "")
            for sub, v in value.items():
                shown = ", ".join(f"{p} {x}" for p, x in v.items()) if isinstance(v, dict) else v
                table.add_row(f"  {sub}", "-" if shown in (None, "") else str(shown))
        else:
            table.add_row(key, "-" if value is None else str(value))
    return table


def show(gather: Callable[[], dict], summarize_one: Callable[[dict, dict | None, float], dict],
         *, watch: float | None, count: int | None, as_json: bool,
         human: Callable[[float], str], console: Console | None = None) -> None:
    """Gather and show the figures once, or every ``watch`` seconds (``count`` times, or
    until interrupted)."""
    console = console or Console()
    rounds = count if count is not None else (None if watch else 1)
    before, last_time, done = None, time.monotonic(), 0
    live = None if as_json or not watch else Live(console=console, auto_refresh=False)
    try:
        if live is not None:
            live.start()
        while rounds is None or done < rounds:
            if done:
                time.sleep(watch)
            now, at = gather(), time.monotonic()
            figures = summarize_one(now, before, at - last_time)
            before, last_time, done = now, at, done + 1
            if as_json:  # one object per line: easy to follow with jq or a script
                print(json.dumps(figures), flush=True)
            elif live is not None:
                live.update(render(figures, human), refresh=True)
            else:
                console.print(render(figures, human))
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
