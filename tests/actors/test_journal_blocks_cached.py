"""Point reads keep the journal blocks they decode in the file cache, so the next read of a
value near them sends no request; scans read each block once and leave the cache alone. In
one process, without Ray."""

import asyncio
import os

import leveled_ray as lr
from leveled_ray.actors.bookie import Bookie
from leveled_ray.codec import object_key
from leveled_ray.read.store_reader import open_reader

from test_merges import write

OPTIONS = lr.Options(journal=dict(compaction_interval_s=0), gc=dict(interval_s=0))
KEYS = 400  # values of 1 000 random bytes: several journal blocks of 64 KiB


def test_point_reads_keep_journal_blocks_and_scans_do_not(tmp_path):
    url = f"file://{tmp_path}/db"
    values = {f"k{i:04d}": os.urandom(1000) for i in range(KEYS)}

    async def load():
        bookie = Bookie(url, OPTIONS, local=True)
        await bookie.start()
        await write(bookie, [lr.Put("b", k, v) for k, v in values.items()], OPTIONS)
        await bookie.close()

    asyncio.run(load())
    reader = open_reader(url, OPTIONS)
    gets = lambda: reader.store.stats.gets  # noqa: E731

    def get_many(*keys):
        return asyncio.run(reader.get_many([object_key("b", k) for k in keys]))

    assert sum(1 for _ in reader.fold_objects("b")) == KEYS
    before = gets()
    assert get_many("k0000") == [values["k0000"]]
    assert gets() > before  # the fold kept no journal block

    before = gets()
    assert get_many("k0001", "k0002") == [values["k0001"], values["k0002"]]
    assert gets() == before  # the block the first get decoded (a reader has no value cache)

    assert get_many(*values) == list(values.values())
    cache = reader.host.cache
    assert 0 < cache.used <= cache.budget
