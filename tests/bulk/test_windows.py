"""SQN windows of bulk writes (actors/write_path.py ``reserve_bulk``): a write across shards
reserves one base in every shard, so that two writes' windows are in the same order in each;
a base below the lowest free one is refused, and nothing is reserved."""

import asyncio

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.manifest.ingest import WINDOW_SQNS


def test_a_window_is_reserved_from_a_given_base_or_refused_below_the_lowest(tmp_path):
    async def run():
        bookie = Bookie(f"file://{tmp_path}/db", lr.Options(metrics_interval_s=0), local=True)
        await bookie.start()
        try:
            first = bookie.reserve_bulk()
            assert first["base"] is not None and first["lowest"] >= first["base"] + WINDOW_SQNS
            taken = bookie.reserve_bulk(at=first["base"])  # below the lowest: refused
            assert taken["base"] is None and taken["lowest"] == first["lowest"]
            at = taken["lowest"] + 12_345  # another shard's lowest, higher than this one's
            given = bookie.reserve_bulk(at=at)
            assert given["base"] == at and given["lowest"] > at + WINDOW_SQNS - 1
            assert bookie.reserve_bulk()["base"] == given["lowest"]
        finally:
            await bookie.close()

    asyncio.run(run())
