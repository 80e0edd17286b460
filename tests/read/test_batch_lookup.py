"""Many-key Ledger lookups (one sort, each file given its run of the keys, each block searched
once) answer as a model does, and as the one-key path does, cold and with every block in the
cache, over an overlay, overlapping L0 files and deeper levels, with keys missing, repeated,
deleted and expired in one batch."""

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from leveled_ray.codec import TOMBSTONE, LedgerEntry, LedgerRows
from leveled_ray.files.clerk import ClerkHost, write_sst
from leveled_ray.files.sst import sort_and_dedupe
from leveled_ray.files.store import ObjectStore
from leveled_ray.options import Options
from leveled_ray.read.views import LedgerFiles, ledger_entries, ledger_get

OPTIONS = Options(ledger=dict(sst_max_keys=64, sst_block_bytes=512))
UNIVERSE = [b"o\x02b\x00\x02k%04d\x00" % i for i in range(300)]


def entry(sqn: int, dead: bool = False, expiry: int = 0) -> LedgerEntry:
    return LedgerEntry(sqn, TOMBSTONE if dead else 0, expiry, sqn * 7, 10, 1, b"")


async def build(levels_keys, overlay_keys, statuses):
    """SSTs (newest data in L0, newest L0 file first) with SQNs that grow toward the top, an
    overlay above them all, and the model's answer for every key."""
    store = ObjectStore.from_url("memory:///batch-lookup")
    sqn, model, levels = 1, {}, []
    for n, files in reversed(list(enumerate(levels_keys))):  # deepest (oldest) first
        infos = []
        for keys in (files if n else reversed(files)):  # L0: oldest file first
            rows = []
            for k in sorted(set(keys)):
                e = entry(sqn, *statuses.get(k, (False, 0)))
                rows.append((k, e))
                model[k] = e
                sqn += 1
            table = sort_and_dedupe(LedgerRows.from_entries(rows).to_batch())
            infos.append(await write_sst(store, table, OPTIONS))
        if n == 0:
            infos.reverse()  # newest first
        else:  # deeper levels: files sorted by key and disjoint
            infos.sort(key=lambda f: f.min_key)
        levels.append(tuple(infos))
    levels.reverse()
    overlay = {}
    for k in overlay_keys:
        overlay[k] = model[k] = entry(sqn)
        sqn += 1
    return ClerkHost(store, 1 << 20), LedgerFiles(1, tuple(levels), sqn), overlay, model


def disjoint_files(draw, keys):
    """Sorted disjoint runs of ``keys`` (a deeper level's files)."""
    keys = sorted(set(keys))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(keys) - 1)), max_size=4)))
    bounds = [0] + [c for c in cuts if c < len(keys)] + [len(keys)]
    return [keys[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@st.composite
def stores(draw):
    key = st.sampled_from(UNIVERSE)
    l0 = draw(st.lists(st.lists(key, min_size=1, max_size=80), max_size=3))
    deeper = [disjoint_files(draw, draw(st.lists(key, min_size=1, max_size=200)))
              for _ in range(draw(st.integers(0, 2)))]
    overlay = draw(st.lists(key, max_size=30))
    statuses = draw(st.dictionaries(key, st.tuples(st.booleans(), st.sampled_from([0, 5])),
                                    max_size=40))
    asked = draw(st.lists(key, min_size=2, max_size=200))
    return [l0] + deeper, overlay, statuses, asked


@settings(max_examples=60, deadline=None)
@given(stores())
def test_many_keys_answer_as_the_model_and_the_one_key_path(case):
    levels_keys, overlay_keys, statuses, asked = case

    async def run():
        host, files, overlay, model = await build(levels_keys, overlay_keys, statuses)
        many = await ledger_entries(host, files, asked, overlay)  # blocks read: cold
        read, hits = host.cache.misses, host.cache.hits
        warm = await ledger_entries(host, files, asked, overlay)  # every block at hand
        assert host.cache.misses == read and (host.cache.hits > hits or not read)
        one = [overlay.get(k) or await ledger_get(host, files, k) for k in asked]
        return many, warm, one, model

    many, warm, one, model = asyncio.run(run())
    assert many == [model.get(k) for k in asked]
    assert warm == many and one == many
