"""The PySpark data source named ``leveled``.

::

    import leveled_ray.spark as lrs
    spark = lrs.session()                      # or: lrs.register(existing_session)
    df.write.format("leveled").option("url", url).mode("append").save()
    spark.read.format("leveled").option("url", url).load()

Reads (:mod:`leveled_ray.bulk.read`) pin a checkpoint, split the key range along SST boundaries
and read each split straight from the object store in the Spark tasks, as Arrow batches.
Writes (:mod:`leveled_ray.bulk.write`) build journal files and SSTs in the tasks and install
them all at once in the writer's ``commit()``; ``abort()`` leaves nothing visible.

A sharded store (:mod:`leveled_ray.bulk.sharded`) is read at one cut, with partitions per
shard and per key range within a shard; a write routes each row to its shard, and its
commit is atomic across shards, also if the driver dies during it.

Options (all strings, as Spark passes them):

- ``url``: the store; or ``store_name`` alone, for a store running under that name (its URL
  and settings then come from the running store, on the Ray cluster at ``ray_address``, by
  default the one the driver ran when it called :func:`register`).
- reads: ``checkpoint`` (read that one; else the read pins its own), ``bucket``,
  ``start_key`` / ``end_key`` (both included; need ``bucket``), ``index`` with
  ``index_start`` / ``index_end`` (a term range of an index field; needs ``bucket``),
  ``with_indexes`` (add the objects' index terms), ``binary_names`` (bucket and key as
  binary), ``splits`` (partitions to aim for, default 8), ``batch_size`` (rows per Arrow
  batch, default 65536), ``lifetime`` (seconds the read's own checkpoint lives unless
  renewed, default 600). Filters on ``bucket`` and ``key`` are
  pushed down into the key range.
- writes: ``store_name`` (the name the running store was opened with: install through its
  Bookies while they serve; without it the store must not be open anywhere),
  ``ray_address``.
- any setting of :class:`~leveled_ray.options.Options` by its text name, such as
  ``object_store.s3_endpoint``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualTo,
    GreaterThanOrEqual,
    InputPartition,
    LessThanOrEqual,
    WriterCommitMessage,
)

from ..bulk import read as bulk_read
from ..bulk import sharded as bulk
from ..bulk import write as bulk_write
from ..bulk.stream import SPARK_SCHEMA
from ..client.ray_connection import ensure_ray
from ..codec.name_text import BYTES_PREFIX, name_from_text
from ..entry_points import connect
from ..errors import InvalidArgumentError
from ..options import Options, value_from_text
from ..read.key_ranges import term_from_text
from .ray_on_spark import with_bin_dir
from .stream import (
    STREAM_READ_OPTIONS,
    STREAM_WRITE_OPTIONS,
    LeveledStreamReader,
    LeveledStreamWriter,
)

FORMAT = "leveled"


_READ_OPTIONS = ("checkpoint", "bucket", "start_key", "end_key", "index", "index_start",
                 "index_end", "with_indexes", "binary_names", "splits", "lifetime", "batch_size",
                 "store_name", "ray_address")


_WRITE_OPTIONS = ("store_name", "ray_address")


_OPTION_FIELDS = set(Options.text_names())


def register(spark, ray_address: str | None = None) -> None:
    """Make ``spark.read.format("leveled")`` and ``df.write.format("leveled")`` work in this
    session (and turn on Python data source filter pushdown, which the reader uses).

    The data source joins the Ray cluster at ``ray_address`` (default: the one this driver
    runs on, if Ray is running here) to reach a store named by the ``store_name`` option, so
    that option alone finds a store this driver opened. Spark's Python workers never start a
    Ray cluster of their own."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    address = ray_address or _driver_ray_address()
    source = LeveledDataSource if address is None else type(
        "LeveledDataSource", (LeveledDataSource,), {"defaults": {"ray_address": address}})
    spark.dataSource.register(source)


def _driver_ray_address() -> str | None:
    import ray

    return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


def session(master: str = "local[2]", app_name: str = "leveled-ray", **conf):
    """A SparkSession set up for leveled-ray: its Python workers run this interpreter (and
    find its ``ray`` command), and the data source is registered. ``conf`` adds Spark
    settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PATH"] = with_bin_dir(os.environ.get("PATH", ""))
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.python.filterPushdown.enabled", "true"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def store_options(options: dict, base: Options | None = None) -> Options:
    """The :class:`Options` fields among a source's options, converted from text (on top of
    ``base``, by default the defaults)."""
    return Options.from_text(options, base, ignore_unknown=True)


def _check_names(options: dict, allowed) -> None:
    unknown = sorted(k for k in options if k not in allowed and k not in _OPTION_FIELDS
                     and k not in ("url", "path"))
    if unknown:
        raise InvalidArgumentError(f"unknown option(s) {unknown} for the leveled data source")


def _target(options: dict) -> tuple[str, Options]:
    """The store's URL and :class:`Options`: from the source's options, or, when only
    ``store_name`` names the store, from the running store itself (its settings, with the
    source's options on top)."""
    url = options.get("url") or options.get("path")
    if url:
        return url, store_options(options)
    name = options.get("store_name")
    if not name:
        raise InvalidArgumentError('the leveled data source needs option("url", ...) or '
                                   'option("store_name", ...) of a running store')
    ensure_ray(options.get("ray_address"), join=True)
    running = connect(name)
    return running.url, store_options(options, running.options)


def read_query(options: dict) -> bulk_read.ReadQuery:
    """The read a source's options describe (checked)."""
    _check_names(options, _READ_OPTIONS)
    index = options.get("index")
    return bulk_read.check_query(bulk_read.ReadQuery(
        bucket=_name_option(options, "bucket"), start=_name_option(options, "start_key"),
        end=_name_option(options, "end_key"), index=index,
        term_start=term_from_text(index or "", options.get("index_start")),
        term_end=term_from_text(index or "", options.get("index_end")),
        with_indexes=_flag(options, "with_indexes"), binary_names=_flag(options, "binary_names")))


def _name_option(options: dict, name: str):
    """A bucket or key given as an option, in its text form (``hex:...`` for bytes)."""
    text = options.get(name)
    return None if text is None else name_from_text(text)


def _text_range(start, end, filters) -> tuple:
    """The narrowest ``(start, end)`` of the keys (as text) the filters and the read's own
    range allow (``None``: open)."""
    for f in filters:
        if isinstance(f, (EqualTo, GreaterThanOrEqual)) and (start is None or f.value > start):
            start = f.value
        if isinstance(f, (EqualTo, LessThanOrEqual)) and (end is None or f.value < end):
            end = f.value
    return start, end


def _str_keys_only(start, end) -> bool:
    """Does no bytes key's text (``hex:...``) fall in ``[start, end]`` (str bounds)? Then the
    store's range of str keys from ``start`` to ``end`` holds every key that does."""
    if not all(b is None or isinstance(b, str) for b in (start, end)):
        return False
    return (end is not None and end < BYTES_PREFIX) or (
        start is not None and start > BYTES_PREFIX[:-1] + chr(ord(BYTES_PREFIX[-1]) + 1))


def _flag(options: dict, name: str) -> bool:
    return value_from_text(name, "bool", options.get(name, "false"))


class LeveledDataSource(DataSource):
    """``format("leveled")``: reads a checkpoint of a store, appends rows to a store."""

    #: Options that :func:`register` recorded for this session (the source's own win).
    defaults: dict = {}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> dict:
        return {**self.defaults, **dict(self.options)}

    def schema(self) -> str:
        if self._streaming():
            return SPARK_SCHEMA
        return read_query(self._options()).spark_schema()

    def _streaming(self) -> bool:
        """Whether these options describe a stream: Spark asks ``schema()`` before it says
        whether it reads a batch or a stream, so a stream names its ``startingPosition``."""
        return "startingposition" in {k.lower() for k in self.options}

    def reader(self, schema) -> DataSourceReader:
        return LeveledReader(self._options())

    def writer(self, schema, overwrite: bool) -> LeveledWriter:
        return LeveledWriter(self._options(), schema, overwrite)

    def streamReader(self, schema) -> LeveledStreamReader:
        options = self._options()
        if not self._streaming():
            raise InvalidArgumentError(
                'a stream of a leveled store needs option("startingPosition", ...): '
                '"snapshot" (its contents, then its changes), "latest", or a position')
        _check_names(options, STREAM_READ_OPTIONS)
        return LeveledStreamReader(options, *_target(options))

    def streamWriter(self, schema, overwrite: bool) -> LeveledStreamWriter:
        # append mode, or complete mode (overwrite): either way each row is a put, so the
        # keys of a complete aggregate's rows are brought up to date (and no other key is
        # touched). Spark offers Python sinks no update mode.
        options = self._options()
        _check_names(options, STREAM_WRITE_OPTIONS)
        return LeveledStreamWriter(options, schema, *_target(options))


class SplitPartition(InputPartition):
    """One split of a read (what one Spark task reads): of the store, or of one shard."""

    def __init__(self, plan: bulk_read.ReadPlan, split: bulk_read.ReadSplit | None,
                 index: int):
        super().__init__(index)
        self.plan = plan
        self.split = split


class LeveledReader(DataSourceReader):
    def __init__(self, options: dict):
        self.options = options
        self.query = read_query(options)
        self.url, self.store_options = _target(options)

    def pushFilters(self, filters):
        """Narrow the scan to the bucket and key range that ``=``, ``>=`` and ``<=`` filters
        on ``bucket`` and ``key`` allow; Spark applies the other filters to what is read.
        Names are compared as text (a bytes name as ``hex:...``, see
        :mod:`~leveled_ray.codec.name_text`), keys in the store by type first: a key range
        is pushed down only when no bytes key's text can fall in it. ``binary_names``
        columns do not tell a str name from a bytes one: nothing is pushed down."""
        if self.query.binary_names:
            yield from filters
            return
        pinned = [f for f in filters if isinstance(f, EqualTo) and f.attribute == ("bucket",)]
        values = {name_from_text(f.value) for f in pinned}
        if len(values) > 1 or (values and self.query.bucket is not None
                               and self.query.bucket not in values):
            self.query = dataclasses.replace(self.query, empty=True)
            yield from (f for f in filters if f not in pinned)
            return
        if values and self.query.index is None:
            self.query = dataclasses.replace(self.query, bucket=values.pop())
        handled = list(pinned) if self.query.index is None else []
        keys = [f for f in filters if getattr(f, "attribute", None) == ("key",)
                and isinstance(f, (EqualTo, GreaterThanOrEqual, LessThanOrEqual))]
        bounds_text = all(b is None or isinstance(b, str) for b in (self.query.start,
                                                                     self.query.end))
        if self.query.bucket is not None and self.query.index is None and keys and bounds_text:
            start, end = _text_range(self.query.start, self.query.end, keys)
            if start is not None and end is not None and start > end:
                self.query = dataclasses.replace(self.query, empty=True)
                handled += keys
            elif _str_keys_only(start, end):
                self.query = dataclasses.replace(self.query, start=start, end=end)
                handled += keys
        yield from (f for f in filters if not any(f is h for h in handled))

    def partitions(self):
        o = self.options
        plans = bulk.begin_reads(
            self.url, self.query, self.store_options, checkpoint=o.get("checkpoint"),
            lifetime=value_from_text("lifetime", "float", o.get("lifetime", 600)),
            splits=value_from_text("splits", "int", o.get("splits", 8)),
            batch_size=value_from_text("batch_size", "int",
                                       o.get("batch_size", bulk_read.BATCH_SIZE)),
            store_name=o.get("store_name"), ray_address=o.get("ray_address"))
        # A plan with nothing to read gets one empty task, which releases its pin.
        pairs = [(plan, split) for plan in plans for split in (plan.splits or [None])]
        return [SplitPartition(plan, split, i) for i, (plan, split) in enumerate(pairs)]

    def read(self, partition: SplitPartition):
        if partition.split is None:
            bulk_read.release(partition.plan)
            return
        yield from bulk_read.read_split(partition.plan, partition.split)


@dataclass
class PartitionMessage(WriterCommitMessage):
    files: bulk_write.PartitionFiles | bulk.ShardedPartitionFiles


class LeveledWriter(DataSourceArrowWriter):
    """Each task writes its rows as store files (each row in its shard's, on a sharded
    store); ``commit`` installs them all at once, in every shard or none."""

    def __init__(self, options: dict, schema, overwrite: bool):
        if overwrite:
            raise InvalidArgumentError('the leveled data source only appends: use mode("append")')
        _check_names(options, _WRITE_OPTIONS)
        bulk_write.check_columns(schema.names)
        url, store = _target(options)
        self.plan = bulk.begin_write(url, store, store_name=options.get("store_name"),
                                     ray_address=options.get("ray_address"))

    def write(self, iterator) -> PartitionMessage:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        return PartitionMessage(bulk.write_partition(self.plan, partition, iterator))

    def commit(self, messages) -> None:
        bulk.commit(self.plan, [m.files for m in messages if m is not None])

    def abort(self, messages) -> None:
        bulk.abort(self.plan, [m.files for m in messages if m is not None])
