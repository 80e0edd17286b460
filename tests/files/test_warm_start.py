"""A warm start (files/warm_start.py) with in-process Bookies: the hot list a Bookie saves at
its close, and what the next open on the node loads from it: the blocks and values the last
Bookie held, within the memory cache's budget, from the disk cache only; a damaged list or
block is a miss, and every read is right."""

from __future__ import annotations

import asyncio
import random

from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import ValueBatch, pack
from leveled_ray.codec import make_change, object_key
from leveled_ray.files import warm_start
from leveled_ray.files.clerk import ClerkHost
from leveled_ray.files.lru import LruCache

KEYS = [object_key("b", f"k{i:05d}") for i in range(3000)]
VALUES = [random.Random(i).randbytes(300) for i in range(len(KEYS))]
PICKED = KEYS[::4]


def options(tmp_path, cache_size: int = 64 << 20) -> lr.Options:
    return lr.Options(cache_size=cache_size,
                      disk_cache={"path": str(tmp_path / "cache"), "local_stores": True,
                                  "warm_s": 60},  # the open waits for all of its warm start
                      ledger={"l0_max_keys": 1000, "push_keys": 500, "sst_block_bytes": 2048},
                      journal={"compaction_interval_s": 0}, gc={"interval_s": 0})


async def written_then_read(tmp_path, count: int, read: list, settle: bool = False) -> int:
    """A Bookie writes ``KEYS[:count]`` and closes; the next one reads ``read`` (once the
    Ledger is merged, with ``settle``) and closes, saving its hot list. How many footers and
    blocks the list names."""
    url = f"file://{tmp_path}/db"
    bookie = Bookie(url, options(tmp_path), local=True)
    await bookie.start()
    for lo in range(0, count, 500):
        pairs = [make_change(lr.Put("b", f"k{i:05d}", VALUES[i]), bookie.options, 0.0)
                 for i in range(lo, min(lo + 500, count))]
        await bookie.put_many(pack([c for c, _ in pairs]),
                              ValueBatch(inline=[v for _, v in pairs]))
    await bookie.close()
    bookie = Bookie(url, options(tmp_path), local=True)
    await bookie.start()
    if settle:
        await quiet(bookie)  # no merge replaces the files it reads before it closes
    await bookie.get_many(read)  # what this Bookie holds in memory when it closes
    held = len(warm_start.hot_list(bookie.view.host, None).blocks)
    await bookie.close()
    return held


async def quiet(bookie) -> None:
    """Until the Ledger holds every write in merged files (no L0 file is left, so no merge
    will replace the files read before the Bookie closes), and the Bookie reads those."""
    def merged() -> bool:
        stats = bookie.penciller.stats()
        return (stats["ledger_sqn"] >= len(KEYS) and not stats["merging"]
                and not stats["l0_files"] and not stats["l0_memory_keys"]
                and bookie.view.files.version == stats["manifest_id"])

    await until(merged, timeout=10)


def test_a_hot_list_reads_back_and_anything_else_is_empty():
    host, values = ClerkHost(None, 1 << 20), LruCache(1 << 20)  # type: ignore[arg-type]
    cache = host.cache
    cache.put(("ledger/a.sst", "footer"), object(), 10)
    cache.put(("ledger/a.sst", ("block", 3)), object(), 10)
    cache.put(("journal/b", ("block", 0)), object(), 10)
    cache.put("not a file's", object(), 10)
    values.put(7, b"v", 65)
    hot = warm_start.hot_list(host, values)
    assert hot.blocks == [("ledger/a.sst", warm_start.FOOTER), ("ledger/a.sst", 3),
                          ("journal/b", 0)] and hot.values == [7]
    assert warm_start.decode(warm_start.encode(hot)) == hot
    for bad in (None, b"", b"\xff\x00", b"[]", b'{"format": 99, "blocks": [], "values": []}',
                b'{"format": 1, "blocks": 3}'):
        assert warm_start.decode(bad) == warm_start.HotList([], [])


def test_an_open_loads_what_the_last_bookie_held_within_its_budget(tmp_path):
    url = f"file://{tmp_path}/db"

    async def run():
        held = await written_then_read(tmp_path, len(KEYS), PICKED, settle=True)
        bookie = Bookie(url, options(tmp_path), local=True)
        await bookie.start()
        host, disk = bookie.view.host, bookie.view.host.disk
        assert bookie.opened["warmed"] > 0 and len(host.cache) == held
        assert len(bookie.view.values) == len(PICKED)
        before = (host.cache.misses, disk.cache.counters["hits"], disk.cache.counters["misses"])
        got = await bookie.get_many(PICKED)
        assert got == [VALUES[KEYS.index(k)] for k in PICKED]
        assert (host.cache.misses, disk.cache.counters["hits"],
                disk.cache.counters["misses"]) == before  # from memory alone
        await bookie.close()

        small = options(tmp_path, cache_size=64 << 10)  # a memory cache a few blocks big
        bookie = Bookie(url, small, local=True)
        await bookie.start()
        host = bookie.view.host
        # It stops once the cache is nearly full: no block it loaded was pushed out again.
        assert 0 < bookie.opened["warmed"] <= len(host.cache) < held
        assert bookie.view.values.used <= bookie.view.values.budget
        assert await bookie.get_many(PICKED) == [VALUES[KEYS.index(k)] for k in PICKED]
        await bookie.close()

    asyncio.run(run())


def test_a_damaged_block_on_disk_is_not_loaded_and_reads_stay_right(tmp_path):
    import diskcache

    url = f"file://{tmp_path}/db"

    async def run():
        await written_then_read(tmp_path, 1000, KEYS[:1000])
        with diskcache.Cache(str(tmp_path / "cache")) as cache:  # each block: a wrong byte
            for key in cache.iterkeys():
                if "@" in key and not key.endswith("hot-list"):
                    data = bytearray(cache.get(key))
                    data[-1] ^= 1
                    cache.set(key, bytes(data))
        bookie = Bookie(url, options(tmp_path), local=True)
        await bookie.start()
        assert bookie.opened["warmed"] == 0
        assert bookie.view.host.disk.cache.counters["bad"] > 0
        assert await bookie.get_many(KEYS[:1000]) == VALUES[:1000]
        await bookie.close()

    asyncio.run(run())


def test_a_warm_start_asks_the_object_store_for_nothing(tmp_path):
    """With every footer gone from the disk cache (its blocks still there), a warm start
    loads nothing: it would need each file's footer from the object store."""
    import diskcache

    url = f"file://{tmp_path}/db"

    async def run():
        await written_then_read(tmp_path, 1000, KEYS[:1000])
        with diskcache.Cache(str(tmp_path / "cache")) as cache:
            footers = []
            for key in cache.iterkeys():
                name, _, span = key.partition("/")[2].rpartition("@")
                if name and span.split("-")[1] == str((tmp_path / "db" / name).stat().st_size):
                    footers.append(key)
            assert footers
            for key in footers:
                del cache[key]
        bookie = Bookie(url, options(tmp_path), local=True)
        await bookie.start()
        assert bookie.opened["warmed"] == 0
        assert bookie.view.host.disk.cache.counters["warm_misses"] > 0
        assert await bookie.get_many(KEYS[:1000]) == VALUES[:1000]
        await bookie.close()

    asyncio.run(run())
