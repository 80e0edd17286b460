"""``leveled-ray export``: a checkpoint of a store (or a bucket / key range of it) as Parquet.

The read is the Spark reader's (:mod:`leveled_ray.bulk.read`), run in this process: the key
range is split along SST boundaries and up to ``parallel`` splits are read at once, each into
its own ``part-SSS-NNNNN.parquet`` file (shard ``SSS`` of a sharded store, ``000`` of a plain
one). Without a checkpoint the export pins its own and releases it when done. Nothing is made
under ``to`` until the read has begun, so refused input leaves no directory behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError
from ..files.sync import sync_twin
from ..options import Options, check_positive_int
from .read import ReadQuery, release_async, split_batches
from .sharded import begin_reads_async


def _target(to: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and directory of ``to`` (a local path or a URI pyarrow knows), which
    must be empty or absent; made by the caller once the read is under way."""
    if "://" in to:
        fs, root = pafs.FileSystem.from_uri(to)
    else:
        fs, root = pafs.LocalFileSystem(), os.path.abspath(to)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        raise InvalidArgumentError(f"{to} is a file: export writes a directory of Parquet files")
    if info.type == pafs.FileType.Directory and fs.get_file_info(
            pafs.FileSelector(root, recursive=False)):
        raise InvalidArgumentError(f"{to} is not empty")
    return fs, root


async def export_async(url: str, to: str, *, options: Options | None = None,
                       checkpoint: str | None = None, query: ReadQuery | None = None,
                       splits: int = 8, parallel: int = 4, progress=None) -> dict:
    """Write the store at ``url`` (at ``checkpoint``, else now) as Parquet files under ``to``.
    ``progress(rows_done, rows_estimated)`` is called as batches land. Returns ``{"rows",
    "files", "checkpoint", "manifest_id"}``."""
    check_positive_int("parallel", parallel)
    fs, root = _target(to)
    # One plan for a plain store, one per shard for a sharded one, all at one checkpoint.
    plans = await begin_reads_async(url, query or ReadQuery(), options, checkpoint=checkpoint,
                                    splits=splits)
    entries = sum(plan.entries for plan in plans)
    gate = asyncio.Semaphore(parallel)
    done = {"rows": 0, "files": 0}

    async def one(part: int, plan, split) -> None:
        async with gate:
            writer = None
            try:
                async with contextlib.aclosing(split_batches(plan, split)) as batches:
                    async for batch in batches:
                        if writer is None:
                            out = fs.open_output_stream(
                                f"{root}/part-{part:03d}-{split.index:05d}.parquet")
                            writer = pq.ParquetWriter(out, batch.schema)
                            done["files"] += 1
                        await asyncio.to_thread(writer.write_batch, batch)
                        done["rows"] += batch.num_rows
                        if progress is not None:
                            progress(done["rows"], max(entries, done["rows"]))
            finally:
                if writer is not None:
                    writer.close()

    try:
        fs.create_dir(root, recursive=True)  # only now: a refused read makes nothing
        await asyncio.gather(*(one(part, plan, split) for part, plan in enumerate(plans)
                               for split in plan.splits))
    finally:  # the splits release it when all are read; this also covers a failed export
        await asyncio.gather(*(release_async(plan) for plan in plans))
    if progress is not None and done["rows"] < entries:  # the estimate was high
        progress(done["rows"], done["rows"])
    versions = [plan.manifest_id for plan in plans]
    return {**done, "checkpoint": plans[0].checkpoint_id,
            "manifest_id": versions[0] if len(versions) == 1 else versions}


export = sync_twin(export_async)
