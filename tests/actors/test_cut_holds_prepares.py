"""A shard that a cut holds prepares no cross-shard part until it thaws, so the parts it
listed when it froze are all it holds for that cut. (Else a batch prepared here after the
freeze, then decided, would be applied by the cut in the other shards only.) One local
Bookie, without Ray."""

import asyncio
import time

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.actors.remote import pack
from leveled_ray.codec import make_change

OPTIONS = lr.Options(journal=dict(compaction_interval_s=0), gc=dict(interval_s=0))


def test_a_frozen_shard_prepares_no_part_until_it_thaws(tmp_path):
    url = f"file://{tmp_path}/db"

    async def run():
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        try:
            change, value = make_change(lr.Put("b", "k", b"v"), OPTIONS, time.time())
            frozen = await bookie.freeze("cut-1", 60.0)
            prepare = asyncio.ensure_future(
                bookie.prepare("txn-1", url, pack([change]), [value]))
            # The prepare's first step runs to its first suspension: held by the cut, that is
            # the admission gate, before it locks a key or holds a part.
            await asyncio.sleep(0)
            assert not bookie.writes.locked([change.lkey])
            assert bookie.participant.pending() == [] and not prepare.done()
            assert bookie.thaw("cut-1")
            assert isinstance(await prepare, tuple)  # prepared once the cut let go
            assert frozen["pending"] == []
            assert bookie.participant.pending() == ["txn-1"]
            assert bookie.writes.locked([change.lkey])
            await bookie.abort_part("txn-1")
            assert not bookie.writes.locked([change.lkey])
        finally:
            await bookie.close()

    asyncio.run(run())
