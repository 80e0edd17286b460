"""A file clerk loads each part of its file once for all readers who ask at once
(files/clerk.py): a reader that is cancelled meanwhile does not fail the others."""

import asyncio

from leveled_ray.files.clerk import ClerkHost
from leveled_ray.files.sst import SstInfo
from leveled_ray.files.store import ObjectStore


def test_a_cancelled_reader_leaves_the_shared_load_to_the_others():
    async def run():
        host = ClerkHost(ObjectStore.from_url("memory://clerk-loads"), 1 << 20)
        clerk = host.sst(SstInfo("ledger/a.sst", 100, 1, 0, b"a", b"z", 1, 1))
        never = asyncio.Event()

        async def loads_for_ever():
            await never.wait()

        async def loads():
            return b"footer"

        first = asyncio.create_task(clerk._cached("footer", loads_for_ever, len))
        await asyncio.sleep(0)  # the first reader's load is in flight ...
        second = asyncio.create_task(clerk._cached("footer", loads, len))
        await asyncio.sleep(0)  # ... and the second waits for it
        first.cancel()
        assert await second == b"footer"
        assert first.cancelled()
        assert await clerk._cached("footer", loads_for_ever, len) == b"footer"  # cached

    asyncio.run(asyncio.wait_for(run(), 10))
