"""``lr.data``: stores as Ray Data datasets (see :mod:`leveled_ray.raydata`).

* :func:`read` pins a checkpoint (or reads the one given) and makes one read task per key
  range, as the Spark source does (:mod:`leveled_ray.bulk.read`): each task reads its range
  straight from the object store as Arrow. Columns ``bucket``, ``key``, ``value``, ``sqn``,
  ``last_modified``; a projection Ray Data pushes down leaves the other columns out. A read
  that pinned its own checkpoint releases it once every range was read, so the Dataset
  reads once: ``materialize()`` it, or pass a checkpoint you keep, to read it again.
* :func:`read_changes` reads the changes between two positions (see
  :mod:`leveled_ray.bulk.stream`), one task per shard and range of changes.
* :func:`sink` writes blocks with columns ``bucket``, ``key``, ``value`` (and optionally
  ``ttl``, ``indexes``) as store files in the write tasks; ``on_write_complete`` installs
  them all at once (in every shard or none), ``on_write_failed`` removes them.
"""

from __future__ import annotations

import pyarrow as pa
from ray.data import Datasource, ReadTask, read_datasource
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasink

from ..bulk import read as bulk_read
from ..bulk import sharded as bulk
from ..bulk import stream
from ..errors import InvalidArgumentError
from ..files.sync import run_sync
from ..options import Options
from ..read.changes import shard_positions


def _target(source, options: Options | None) -> tuple[str, Options, object]:
    """``(url, options, open store handle or None)`` of a URL or an open store handle."""
    if isinstance(source, str):
        return source, options or Options(), None
    url = getattr(source, "url", None)
    if url is None:
        raise InvalidArgumentError(f"expected a store URL or an open store, not {source!r}")
    return url, options or source.options, source


def _metadata(source: str) -> BlockMetadata:
    """A read task's metadata: rows and bytes unknown, and what it reads named (with no
    input named at all, Ray 2.60 plans a read as empty: ``count()`` answered 0)."""
    return BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                         input_files=[source])


class StoreDatasource(Datasource):
    """A checkpoint of a store, one read task per key range (see the module docstring)."""

    def __init__(self, url: str, options: Options, checkpoint: str, *, owns: bool,
                 query: bulk_read.ReadQuery | None = None, lifetime: float = 600.0):
        super().__init__()
        self._projection_map = None  # Ray 2.60's Datasource.__init__ leaves it unset
        self.url, self.options = url, options
        self.checkpoint, self.owns, self.lifetime = checkpoint, owns, lifetime
        self.query = bulk_read.check_query(query or bulk_read.ReadQuery())

    def supports_projection_pushdown(self) -> bool:
        return True

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context=None) -> list[ReadTask]:
        # Ray Data may plan a read more than once: every plan reads the one checkpoint, and
        # the plan that runs releases it (when the read owns it) once every range was read.
        plans = bulk.begin_reads(self.url, self.query, self.options, checkpoint=self.checkpoint,
                                 lifetime=self.lifetime, splits=max(1, parallelism),
                                 owns_checkpoint=self.owns)
        columns = self._get_data_columns()
        if columns == []:  # count(): Ray 2.60 counts a block of no columns as no rows
            columns = ["sqn"]
        schema = self.query.arrow_schema()
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        tasks = []
        for plan in plans:
            if not plan.splits:  # nothing to read in this shard: let go of its pin now
                bulk_read.release(plan)
            for split in plan.splits:
                tasks.append(ReadTask(
                    lambda plan=plan, split=split: _split_tables(plan, split, columns),
                    _metadata(f"{plan.url}#checkpoint={plan.checkpoint_id}&split={split.index}"),
                    schema=schema, per_task_row_limit=per_task_row_limit))
        return tasks


def _split_tables(plan, split, columns):
    for batch in bulk_read.read_split(plan, split):
        table = pa.Table.from_batches([batch])
        yield table if columns is None else table.select(columns)


def read(source, checkpoint: str | None = None, *, bucket=None, start=None, end=None,
         options: Options | None = None, lifetime: float = 600.0, **read_args):
    """A ``ray.data.Dataset`` of the live objects of a store (a URL, or an open ``Store`` /
    ``ShardedStore``): every bucket, or ``bucket`` from key ``start`` to ``end`` (both
    included). ``checkpoint`` reads that checkpoint; otherwise the read pins its own (through
    the running store when given one). ``read_args`` go to ``ray.data.read_datasource``
    (``override_num_blocks``, ``ray_remote_args``, ...)."""
    url, options, handle = _target(source, options)
    query = bulk_read.check_query(bulk_read.ReadQuery(bucket=bucket, start=start, end=end))
    owns = checkpoint is None
    if owns:
        checkpoint = run_sync(bulk.pin_async(url, options, lifetime, owner=handle,
                                             name="ray-data-read"))
    return read_datasource(StoreDatasource(url, options, checkpoint, owns=owns, query=query,
                                           lifetime=lifetime), **read_args)


class ChangesDatasource(Datasource):
    """The changes of a store between two positions, one task per shard and range."""

    def __init__(self, target: stream.Target, after, until):
        super().__init__()
        self.target = target
        self.start = {"lease": "", "checkpoint": "", "done": True,
                      "sqn": _position(after, target)}
        self.end = {**self.start, "sqn": _position(until, target) if until is not None
                    else target.position(run_sync(stream.tops(target)))}

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context=None) -> list[ReadTask]:
        parts = run_sync(stream.plan_async(self.target, self.start, self.end))
        return [ReadTask(lambda part=part: (pa.Table.from_batches([b])
                                            for b in stream.read(self.target, part)),
                         _metadata(f"{self.target.url}#shard={part.shard}&changes="
                                   f"{part.lo}-{part.hi}"), schema=stream.STREAM_SCHEMA,
                         per_task_row_limit=per_task_row_limit) for part in parts]


def _position(position, target: stream.Target) -> dict[str, int]:
    if target.shard_map is None and isinstance(position, int):
        position = {"0": position}
    return target.position(shard_positions(position, target.labels))


def read_changes(source, after=0, until=None, *, options: Options | None = None,
                 **read_args):
    """A ``ray.data.Dataset`` of the changes with ``after < sqn <= until`` (``until=None``:
    up to now), with columns of :data:`~leveled_ray.bulk.stream.STREAM_SCHEMA`; positions as
    for ``store.changes``. Raises ``HistoryUnavailableError`` when read if compaction has
    dropped changes after ``after``."""
    url, options, _ = _target(source, options)
    target = run_sync(stream.target_async(url, options))
    return read_datasource(ChangesDatasource(target, after, until), **read_args)


class StoreDatasink(Datasink):
    """Writes a Dataset through the bulk path (see the module docstring). One sink writes
    once: its SQN window is reserved when it is made."""

    def __init__(self, url: str, options: Options, store_name: str | None = None):
        self.plan = bulk.begin_write(url, options, store_name=store_name)
        self.written = 0

    def write(self, blocks, ctx):
        batches = (b for block in blocks
                   for b in (block if isinstance(block, pa.Table)
                             else pa.Table.from_pandas(block)).to_batches())
        return bulk.write_partition(self.plan, ctx.task_idx, batches)

    def on_write_complete(self, write_result) -> None:
        self.written = bulk.commit(self.plan, list(write_result.write_returns))

    def on_write_failed(self, error: Exception) -> None:
        bulk.abort(self.plan, [])

    def get_name(self) -> str:
        return "LeveledStore"


def sink(target, *, options: Options | None = None) -> StoreDatasink:
    """A ``ray.data.Datasink`` for ``ds.write_datasink(...)`` into a store: a URL (no process
    has it open), or an open store handle opened with a ``name`` (its running Bookies then
    install the files)."""
    url, options, handle = _target(target, options)
    name = None if handle is None else handle.name
    if handle is not None and name is None:
        raise InvalidArgumentError("a Dataset is written into a running store through its "
                                   "name: open it with name=..., or write to its URL while "
                                   "no process has it open")
    return StoreDatasink(url, options, name)
