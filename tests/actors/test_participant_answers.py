"""A shard's answers to a cross-shard batch's calls, one local Bookie without Ray: a resent
prepare gets the same part, another batch's prepare of a held key is told ``busy``."""

import asyncio
import time

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import pack
from leveled_ray.cluster.txn import BUSY
from leveled_ray.codec import make_change

OPTIONS = lr.Options(journal=dict(compaction_interval_s=0), gc=dict(interval_s=0))


def test_a_resent_prepare_gets_its_part_and_another_batch_is_told_busy(tmp_path):
    url = f"file://{tmp_path}/db"

    async def run():
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        try:
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            first = await bookie.prepare("txn-1", url, pack([change]), [value])
            assert await bookie.prepare("txn-1", url, pack([change]), [value]) == first
            assert bookie.participant.prepared == 1
            other, value2 = make_change(lr.Put("b", "k", b"w"), OPTIONS, time.time())
            assert await bookie.prepare("txn-2", url, pack([other]), [value2]) == BUSY
            assert bookie.participant.pending() == ["txn-1"]
            await bookie.abort_part("txn-1")
            assert isinstance(await bookie.prepare("txn-2", url, pack([other]), [value2]),
                              tuple)  # the key is free again
            await bookie.abort_part("txn-2")
        finally:
            await bookie.close()

    asyncio.run(run())
