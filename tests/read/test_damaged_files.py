"""A damaged file is damage, not a failed request: reading a store whose journal file or SST
was truncated raises ``CorruptObjectError`` naming the object (no retry can help), never an
``ObjectStoreError`` that says it is safe to retry."""

import os
import pathlib
import random

import pyarrow as pa
import pytest

import leveled_ray as lr
from leveled_ray.bulk import write as bulk

N = 300
KEYS = [("b", f"k{i:04d}") for i in range(N)]


def made(tmp_path, kind: str) -> tuple[str, str, list[str]]:
    """A store written by a bulk write (no Ray), a checkpoint of it, and the paths on disk
    of its journal files or its SSTs (``kind``)."""
    url = f"file://{tmp_path}/db"
    plan = bulk.begin(url)
    rows = pa.record_batch({"bucket": [b for b, _ in KEYS], "key": [k for _, k in KEYS],
                            "value": [os.urandom(200) for _ in KEYS]})
    bulk.commit(plan, [bulk.write_partition(plan, 0, [rows])])
    checkpoint = lr.admin(url).create_checkpoint().id
    suffix = {"journal": ".jnl", "ledger": ".sst"}[kind]
    # (a journal slot's file, named by its number, holds the fence: no change is in it)
    return url, checkpoint, sorted(str(p) for p in (tmp_path / "db").rglob(f"*{suffix}")
                                   if not p.stem.isdigit())


@pytest.mark.parametrize("kind", ["journal", "ledger"])
def test_a_truncated_file_reads_as_corrupt_naming_it(tmp_path, kind):
    url, checkpoint, paths = made(tmp_path, kind)
    original = {p: pathlib.Path(p).read_bytes() for p in paths}
    rng = random.Random(36)
    corrupt = 0
    for trial in range(60):
        path = rng.choice(paths)
        data = original[path]
        cut = rng.randrange(0, len(data)) if trial % 3 else len(data) - rng.randrange(1, 64)
        with open(path, "wb") as f:
            f.write(data[:cut])
        try:
            with lr.reader(url, checkpoint) as r:
                r.get_many(KEYS)
        except lr.CorruptObjectError as exc:
            assert os.path.basename(path) in exc.path, exc
            corrupt += 1
        finally:
            with open(path, "wb") as f:
                f.write(data)
    assert corrupt == 60  # every file is read whole by get_many: each cut is found
