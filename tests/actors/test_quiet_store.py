"""A quiet store cleans up after itself: L0 memory is persisted by age, so journal compaction
reclaims replaced and deleted values though far fewer than ``l0_max_keys`` changes were made.
In one process, without Ray."""

import asyncio
import contextlib
import os

from support.waits import until

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.codec import object_key

from test_merges import write

KEYS, ROUNDS, VALUE = 2000, 6, 1024
OPTIONS = lr.Options(ledger=dict(l0_max_age_s=0.5), journal=dict(compaction_interval_s=0),
                     gc=dict(interval_s=0))


def _bytes_under(root, folder):
    total = 0
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


def test_a_quiet_store_reclaims_replaced_and_deleted_values(tmp_path):
    root = str(tmp_path / "db")
    assert OPTIONS.ledger.l0_max_keys > KEYS * ROUNDS  # no flush by size: only by age

    async def run():
        bookie = Bookie(f"file://{root}", OPTIONS, local=True)
        await bookie.start()
        for r in range(ROUNDS):
            for lo in range(0, KEYS, 250):
                await write(bookie, [lr.Put("b", f"k{i}", bytes([r]) + os.urandom(VALUE - 1))
                                     for i in range(lo, lo + 250)], OPTIONS)
        await write(bookie, [lr.Delete("b", f"k{i}") for i in range(KEYS // 2)], OPTIONS)
        written = _bytes_under(root, "journal")
        live = KEYS // 2 * VALUE
        assert written > ROUNDS * KEYS * VALUE // 2  # values compress little: all are there
        async def compacted() -> bool:  # as a quiet store's schedule would compact it
            if _bytes_under(root, "journal") <= 3 * live:
                return True
            await bookie.compact_journal()
            await bookie.inker.wait_compaction()
            return False

        with contextlib.suppress(AssertionError):  # the assertion below says by how much
            await until(compacted, timeout=60, interval=0.05)
        reclaimed = _bytes_under(root, "journal")
        penciller = bookie.penciller
        assert penciller.counters["age_flushes"] + penciller.counters["l0_flushes"] >= 1
        assert reclaimed <= 3 * live, f"{reclaimed} bytes left for {live} live"
        got = await bookie.get_many([object_key("b", f"k{i}") for i in range(KEYS)])
        assert got[: KEYS // 2] == [None] * (KEYS // 2)
        assert all(v[:1] == bytes([ROUNDS - 1]) and len(v) == VALUE for v in got[KEYS // 2:])
        await bookie.close()
        return written, reclaimed

    written, reclaimed = asyncio.run(run())
    assert reclaimed < written / 5


def test_l0_memory_is_persisted_once_old(tmp_path):
    async def run():
        bookie = Bookie(f"file://{tmp_path}/db", OPTIONS, local=True)
        await bookie.start()
        await write(bookie, [lr.Put("b", f"k{i}", b"v") for i in range(10)], OPTIONS)
        penciller = bookie.penciller
        await until(lambda: penciller.latest.manifest.ledger_sqn >= 10, timeout=10)
        assert penciller.latest.manifest.ledger_sqn >= 10  # far below l0_max_keys, yet persisted
        assert penciller.counters["age_flushes"] >= 1
        await bookie.close()

    asyncio.run(run())
