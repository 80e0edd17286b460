"""``leveled-ray demo``: load objects, read them back, restart the store, print a summary."""

from __future__ import annotations

import random
import statistics
import sys
import time

from tqdm import tqdm

from .. import entry_points as face
from ..codec import Put
from ..errors import InvalidArgumentError
from ..options import Options

BATCH = 1000


def _value(i: int, size: int) -> bytes:
    return random.Random(i).randbytes(size)


def _p50_ms(fn, n: int) -> float:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def run_demo(url: str, objects: int, value_bytes: int, options: Options,
             shards: int | None = None) -> int:
    """Load ``objects`` values of ``value_bytes`` into the store at ``url`` (``shards``: a
    sharded store of that many shards), read them back, restart the store, check a sample and
    print a summary. Returns the exit status: 0 if every value read back was right. Bad input
    raises ``InvalidArgumentError`` before anything starts."""
    if objects < 1 or value_bytes < 0:
        raise InvalidArgumentError(
            f"--objects must be at least 1 and --value-bytes at least 0: {objects}, {value_bytes}")
    where = url if shards is None else f"{url} ({shards} shards)"
    print(f"leveled-ray demo: {objects} objects of {value_bytes} bytes into {where}")
    print("starting Ray and the store's actors ...", flush=True)
    t0 = time.perf_counter()
    store = face.open(url, options, shards=shards)
    opened_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with tqdm(total=objects, unit="obj", desc="load", file=sys.stdout) as bar:
        for lo in range(0, objects, BATCH):
            hi = min(objects, lo + BATCH)
            store.put_many([Put("demo", f"key-{i:08d}", _value(i, value_bytes))
                            for i in range(lo, hi)])
            bar.update(hi - lo)
    load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    wrong = 0
    with tqdm(total=objects, unit="obj", desc="read", file=sys.stdout) as bar:
        for lo in range(0, objects, BATCH):
            hi = min(objects, lo + BATCH)
            values = store.get_many([("demo", f"key-{i:08d}") for i in range(lo, hi)])
            wrong += sum(v != _value(i, value_bytes) for i, v in zip(range(lo, hi), values))
            bar.update(hi - lo)
    read_s = time.perf_counter() - t0
    sample = min(objects, 200)
    get_p50 = _p50_ms(lambda i: store.get("demo", f"key-{(i * 7919) % objects:08d}"), sample)
    put_p50 = _p50_ms(lambda i: store.put("demo-single", f"k{i}", b"x" * value_bytes), sample)

    print("restarting the store ...", flush=True)
    store.close()
    t0 = time.perf_counter()
    store = face.open(url, options)
    restart_s = time.perf_counter() - t0
    checks = random.Random(1).sample(range(objects), min(objects, 500))
    after = store.get_many([("demo", f"key-{i:08d}") for i in checks])
    wrong += sum(v != _value(i, value_bytes) for i, v in zip(checks, after))
    stats = store.stats()
    store.close()

    mib = objects * value_bytes / 2**20
    rows = [
        ("objects loaded", f"{objects}"),
        ("data", f"{mib:.1f} MiB"),
        ("open (first)", f"{opened_s:.2f} s"),
        ("load (put_many x1000)", f"{objects / load_s:,.0f} obj/s   {mib / load_s:.1f} MiB/s"),
        ("read back (get_many x1000)", f"{objects / read_s:,.0f} obj/s"),
        ("get p50 / put p50", f"{get_p50:.2f} ms / {put_p50:.2f} ms"),
        ("restart (clean close)", f"{restart_s:.2f} s, replayed {stats['replayed']} changes"),
        ("ledger / journal files", f"{stats['ledger_files']} / {stats['journal_files']}"),
        ("values checked", "all correct" if wrong == 0 else f"{wrong} WRONG"),
    ]
    width = max(len(r[0]) for r in rows)
    print()
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    return 0 if wrong == 0 else 1
