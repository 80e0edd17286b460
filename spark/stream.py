"""Spark Structured Streaming with the ``leveled`` format: ``spark.readStream`` of a store's
changes (see :mod:`leveled_ray.bulk.stream` for offsets and what a batch holds) and
``writeStream`` of rows into a store, each micro-batch exactly once.

Read options (with ``url`` or ``store_name`` as for batch reads):

- ``startingPosition``: ``snapshot`` (default: the contents at a cut, then every change
  after it), ``latest``, or a position (``120``; ``{"0": 120, "1": 97}`` on a sharded store);
- ``maxChangesPerTrigger``: about how many changes one micro-batch reads at most (the
  contents batch is one batch, however large);
- ``lease_s`` (3600): how long history is held for a query that stops committing;
- ``splits`` (8): partitions of the contents batch.

Write options: ``url`` or ``store_name``, and ``writer``: a name for the query that stays the
same across its restarts (two queries must not share one). A micro-batch is installed with one
manifest change (on a sharded store, one commit across the shards) that also records
``(writer, batch id)``, so a batch Spark sends again changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

try:  # PySpark 4.2 and later: a stream reader sees its start offset and a read limit
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover (the project installs 4.3)
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object

from ..bulk import sharded as bulk
from ..bulk import stream
from ..bulk import write as bulk_write
from ..client.ray_connection import ensure_ray
from ..entry_points import connect
from ..errors import InvalidArgumentError
from ..files.sync import run_sync
from ..options import check_number, value_from_text

#: Option names as Spark passes them (lower case).
STREAM_READ_OPTIONS = ("startingposition", "maxchangespertrigger", "lease_s", "splits",
                       "store_name", "ray_address")
STREAM_WRITE_OPTIONS = ("writer", "store_name", "ray_address", "checkpointlocation")


class PartPartition(InputPartition):
    def __init__(self, part: stream.Part, index: int):
        super().__init__(index)
        self.part = part


class LeveledStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are :mod:`~leveled_ray.bulk.stream` offsets; :meth:`commit` moves the query's
    history lease. ``availableNow`` runs batches (each within ``maxChangesPerTrigger``) up to
    each shard's newest change when the run began: without
    :meth:`prepareForTriggerAvailableNow`, Spark would run such a query as a single batch,
    and a restart that re-plans its last batch would then read nothing new."""

    def __init__(self, options: dict, url: str, store_options):
        if ReadMaxRows is None:  # 4.0/4.1's latestOffset() cannot see its start: a capped
            # batch could make offsets go backwards and read rows again
            raise InvalidArgumentError("streaming reads need PySpark 4.2 or later")
        self.options = options
        self.target = run_sync(stream.target_async(url, store_options))
        self.lease_s = check_number("lease_s", value_from_text(
            "lease_s", "float", options.get("lease_s", 3600)), minimum=0, inclusive=False)
        self.splits = value_from_text("splits", "int", options.get("splits", 8))
        limit = options.get("maxchangespertrigger")
        self.max_changes = None if limit is None else value_from_text(
            "maxChangesPerTrigger", "int", limit)
        if self.max_changes is not None and self.max_changes < 1:
            raise InvalidArgumentError("maxChangesPerTrigger must be at least 1")
        self._renewed: float | None = None
        self._until: list[int] | None = None  # an availableNow run's last positions

    def _owner(self):
        """The running store named ``store_name`` (a cut of a sharded store is made through
        it while it runs), or ``None``."""
        name = self.options.get("store_name")
        if name is None:
            return None
        ensure_ray(self.options.get("ray_address"), join=True)
        return connect(name)

    def initialOffset(self) -> dict:
        return run_sync(stream.start_async(self.target,
                                           self.options.get("startingposition", "snapshot")))

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = run_sync(stream.tops(self.target))

    def getDefaultReadLimit(self):
        return ReadAllAvailable() if self.max_changes is None else ReadMaxRows(self.max_changes)

    def latestOffset(self, start: dict, limit) -> dict:
        if stream.lease_due(self._renewed, self.lease_s):  # an idle query keeps its history
            run_sync(stream.hold(self.target, start, self.lease_s))
            self._renewed = time.monotonic()
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        owner = self._owner() if not start["lease"] else None
        return run_sync(stream.latest_async(self.target, start, cap, until=self._until,
                                            lease_s=self.lease_s, owner=owner))

    def partitions(self, start: dict, end: dict):
        parts = run_sync(stream.plan_async(self.target, start, end, self.splits))
        return [PartPartition(p, i) for i, p in enumerate(parts)]

    def read(self, partition: PartPartition):
        yield from stream.read(self.target, partition.part)

    def commit(self, end: dict) -> None:
        run_sync(stream.commit_async(self.target, end, self.lease_s))
        self._renewed = time.monotonic()


@dataclass
class StreamMessage(WriterCommitMessage):
    plan: bulk_write.BulkWrite | bulk.ShardedBulkWrite
    files: bulk_write.PartitionFiles | bulk.ShardedPartitionFiles


class LeveledStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is a bulk write (see :mod:`leveled_ray.bulk.sharded`) whose commit
    records ``(writer, batch id)``: with its files in a plain store's manifest, or as the
    batch's own commit record across a sharded store's shards. Spark builds this writer
    once for the query (and again for each commit), so each task reserves its own SQN
    windows when it starts: they then sit above every batch installed before."""

    def __init__(self, options: dict, schema, url: str, store_options):
        writer = options.get("writer")
        if not writer:
            raise InvalidArgumentError('a streaming write needs option("writer", <a name that '
                                       'stays the same across restarts of the query>)')
        bulk_write.check_columns(schema.names)
        run_sync(stream.target_async(url, store_options))  # a store is there
        self.writer = writer
        self.url, self.store_options = url, store_options
        self.store_name = options.get("store_name")
        self.ray_address = options.get("ray_address")

    def write(self, iterator) -> StreamMessage:
        from pyspark import TaskContext

        if self.store_name is not None:
            ensure_ray(self.ray_address, join=True)
        plan = bulk.begin_write(self.url, self.store_options, store_name=self.store_name,
                                ray_address=self.ray_address)
        partition = TaskContext.get().partitionId()
        return StreamMessage(plan, bulk.write_partition(plan, partition, iterator))

    def commit(self, messages, batchId: int) -> None:
        done = [m for m in messages if m is not None]
        if not done:
            return
        try:
            bulk.commit(done[0].plan, [m.files for m in done], (self.writer, int(batchId)))
        finally:
            for m in done[1:]:
                run_sync(bulk.release_pins(m.plan))

    def abort(self, messages, batchId: int) -> None:
        for m in messages:
            if m is not None:
                bulk.abort(m.plan, [m.files])
