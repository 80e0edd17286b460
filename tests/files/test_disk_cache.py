"""The node's disk cache (files/disk_cache.py) on its own: what it keeps it gives back, keyed
by store, and whatever happens to its files (flipped bytes, truncation, deletion, a corrupt
index) a read is a miss, never wrong bytes and never an error."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random

import pytest

import leveled_ray as lr
from leveled_ray.files import disk_cache
from leveled_ray.files.disk_cache import DiskTier, NodeCache, node_cache

SMALL, LARGE = 100, 3 * disk_cache.FILE_BYTES  # kept in the index / in a file of its own


def spans(n: int) -> list[tuple[int, int]]:
    return [(i * LARGE, (i + 1) * LARGE) if i % 2 else (i * SMALL, (i + 1) * SMALL)
            for i in range(n)]


def content(name: str, lo: int, hi: int) -> bytes:
    return random.Random(f"{name}{lo}").randbytes(hi - lo)


def filled(path, n: int = 40) -> DiskTier:
    tier = DiskTier(NodeCache(str(path), 1 << 30), "store-a")
    for lo, hi in spans(n):
        tier.put("journal/00000001", lo, hi, content("journal/00000001", lo, hi))
    tier.cache.flush()
    return tier


def read(tier: DiskTier, n: int = 40) -> list[bytes | None]:
    return asyncio.run(tier.get_many("journal/00000001", spans(n)))


def assert_never_wrong(got: list[bytes | None]) -> int:
    """Each read is right or a miss; how many hit."""
    for (lo, hi), data in zip(spans(len(got)), got):
        assert data is None or data == content("journal/00000001", lo, hi), (lo, hi)
    return sum(data is not None for data in got)


def test_what_it_keeps_it_gives_back_by_store_and_range(tmp_path):
    tier = filled(tmp_path)
    assert assert_never_wrong(read(tier)) == 40
    other = DiskTier(tier.cache, "store-b")  # the same name in another store is another file
    assert asyncio.run(other.get_many("journal/00000001", spans(2))) == [None, None]
    assert asyncio.run(tier.get_many("journal/00000001", [(0, SMALL - 1)])) == [None]
    # a clone reads its ancestor's file as "@<ancestor id>/<name>": the same entry
    clone = DiskTier(tier.cache, "store-c")
    assert asyncio.run(clone.get_many("@store-a/journal/00000001", spans(1))) == read(tier, 1)
    stats = tier.cache.stats()
    assert stats["hits"] >= 41 and stats["misses"] == 3 and stats["errors"] == 0


def test_another_process_on_the_node_reads_what_one_kept(tmp_path):
    filled(tmp_path)
    again = DiskTier(NodeCache(str(tmp_path), 1 << 30), "store-a")  # a restarted process
    assert assert_never_wrong(read(again)) == 40


def value_files(path) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files
                  if f.endswith(".val"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "swap"])
def test_a_damaged_value_file_is_a_miss(tmp_path, damage):
    tier = filled(tmp_path)
    files = value_files(tmp_path)
    assert len(files) == 20  # the large entries
    for i, name in enumerate(files):
        if damage == "flip":
            with open(name, "r+b") as f:
                f.seek(LARGE // 2)
                byte = f.read(1)
                f.seek(LARGE // 2)
                f.write(bytes([byte[0] ^ 0xFF]))
        elif damage == "truncate":
            os.truncate(name, i * 100)
        elif damage == "delete":
            os.remove(name)
        elif i % 2:  # two entries' files trade places: each holds the other's bytes
            first, second = (pathlib.Path(n) for n in (files[i - 1], name))
            data = first.read_bytes()
            first.write_bytes(second.read_bytes())
            second.write_bytes(data)
    got = read(tier)
    assert assert_never_wrong(got) == 20  # the small entries, in the index
    assert all(got[i] is None for i in range(1, 40, 2))
    if damage != "delete":  # a deleted file is a plain miss; the others fail their hash
        assert tier.cache.stats()["bad"] == 20


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete"])
def test_a_corrupt_index_is_a_miss_then_made_again(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(disk_cache, "REOPEN_AFTER_S", 0.0)
    tier = filled(tmp_path)
    index = tmp_path / "cache.db"
    if damage == "garbage":
        with open(index, "r+b") as f:
            f.seek(0)
            f.write(os.urandom(4096))
    elif damage == "truncate":
        os.truncate(index, 1000)
    else:
        for name in os.listdir(tmp_path):
            if name.startswith("cache.db"):
                os.remove(tmp_path / name)
    for cache in (tier.cache, NodeCache(str(tmp_path), 1 << 30)):  # open, and opened after
        tier = DiskTier(cache, "store-a")
        assert_never_wrong(read(tier))
        tier.put("journal/00000001", 0, SMALL, content("journal/00000001", 0, SMALL))
        tier.cache.flush()
        assert read(tier, 1) == [content("journal/00000001", 0, SMALL)]  # it works again


def test_only_stores_not_already_local_are_cached_and_size_zero_is_off(tmp_path):
    options = lr.Options(disk_cache={"path": str(tmp_path)})
    assert node_cache(options, "memory://x") is None
    assert node_cache(options, "file:///tmp/x") is None
    assert node_cache(options, "s3://bkt/x") is not None
    assert node_cache(options.replace(disk_cache={"local_stores": True}), "file:///x")
    assert node_cache(options.replace(disk_cache={"size": 0}), "s3://bkt/x") is None
    for bad in ({"size": -1}, {"size": 1.5}, {"path": 3}, {"local_stores": "yes"}):
        with pytest.raises(lr.InvalidArgumentError, match="disk_cache"):
            lr.Options(disk_cache=bad)
