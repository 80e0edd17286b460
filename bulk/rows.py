"""The rows of a bulk write as Arrow columns: checked, keyed, sorted and given SQNs.

A partition of a bulk write collects its rows as *run* tables (:data:`RUN_SCHEMA`: one row
per object, before SQNs are given), then writes each run sorted by key, giving SQNs in key
order. So the Journal holds each run's values in key order too, and a read of a key range
finds its values in a few contiguous spans of blocks instead of scattered over every file.

Plain rows (string or binary names, no index terms) are checked and keyed with Arrow
compute kernels (:func:`plain_rows`). Rows with index terms, or rows that fail a check, go
through the per-row path, which gives the same errors as ``put_many``.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from ..codec import ACTIVE, LEDGER_SCHEMA, OP_PUT, LedgerRows, checked_key
from ..codec.name_text import has_bytes_names, name_from_text
from ..files import journal as jfmt
from ..files.framing import size_cuts
from ..files.sst import sort_and_dedupe
from ..options import Options

#: One object per row, as a partition collects them.
RUN_SCHEMA = pa.schema([
    ("lkey", pa.binary()), ("value", pa.binary()), ("hash", pa.uint64()),
    ("indexes", pa.binary()), ("expiry", pa.uint32()), ("extra", pa.binary()),
])
_NAME_TAGS = {pa.string(): b"\x02", pa.binary(): b"\x01"}


def _narrow(column: pa.Array) -> pa.Array:
    """Large string and binary columns as their 32-bit-offset forms (a batch's values fit)."""
    wide = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    return column.cast(wide[column.type]) if column.type in wide else column


def _name_ok(column: pa.Array, max_bytes: int) -> bool:
    """Whether every bucket or key in ``column`` passes ``check_name`` and needs no
    escaping (no zero byte), so it can be keyed in bulk."""
    if column.type not in _NAME_TAGS or column.null_count:
        return False
    if column.type == pa.string() and has_bytes_names(column):
        return False  # text forms of bytes names: see names()
    size = pc.binary_length(column)
    return bool(pc.all(pc.and_(pc.greater(size, 0), pc.less_equal(size, max_bytes))).as_py()
                and not pc.any(pc.match_substring(column, "\x00")).as_py())


def names(column: pa.Array) -> list:
    """The buckets or keys of a column, one by one: a ``string`` column's text forms (see
    :mod:`~leveled_ray.codec.name_text`) as the names they stand for."""
    found = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [name_from_text(n) if isinstance(n, str) else n for n in found]
    return found


def _expiry(ttl: pa.Array | None, n: int, now_s: float) -> np.ndarray | None:
    """Expiries (unix seconds, 0 = never) for a ``ttl`` column, as ``check_ttl`` gives them,
    or ``None`` if a TTL is not a positive number of seconds ending before 2106."""
    if ttl is None or ttl.null_count == n:
        return np.zeros(n, dtype=np.uint32)
    if not (pa.types.is_integer(ttl.type) or pa.types.is_floating(ttl.type)):
        return None
    seconds = pc.fill_null(ttl.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    given = ~np.isnan(seconds)
    expiry = np.ceil(now_s + np.where(given, seconds, 0.0))
    if np.any(given & ~((seconds > 0) & np.isfinite(seconds) & (expiry < 2**32))):
        return None
    return np.where(given, expiry, 0).astype(np.uint32)


def plain_rows(batch: pa.RecordBatch, options: Options, now_s: float) -> pa.Table | None:
    """The run rows of a batch whose rows are all plain puts, keyed in bulk; ``None`` when
    some row needs the per-row path (index terms, or a value that fails a check)."""
    indexes = batch.column("indexes") if "indexes" in batch.schema.names else None
    if indexes is not None and indexes.null_count != len(indexes):
        return None
    bucket, key, value = (_narrow(batch.column(c)) for c in ("bucket", "key", "value"))
    if not (_name_ok(bucket, options.max_key_bytes) and _name_ok(key, options.max_key_bytes)):
        return None
    if value.type != pa.binary() or value.null_count or (
            len(value) and pc.max(pc.binary_length(value)).as_py() > options.max_value_bytes):
        return None
    n = len(value)
    ttl = batch.column("ttl") if "ttl" in batch.schema.names else None
    expiry = _expiry(ttl, n, now_s)
    if expiry is None:
        return None
    lkey = _object_keys(bucket, key)
    digest = xxhash.xxh3_64_intdigest
    hashes = pa.array([digest(v) for v in value.to_pylist()], pa.uint64())
    return pa.Table.from_arrays([
        lkey, value, hashes, pa.nulls(n, pa.binary()),
        pa.array(expiry),
        pa.array([b""] * n, pa.binary()),
    ], schema=RUN_SCHEMA)


def _object_keys(bucket: pa.Array, key: pa.Array) -> pa.Array:
    """Object Ledger keys of names checked by :func:`_name_ok` (no escaping needed)."""
    return pc.binary_join_element_wise(
        b"o" + _NAME_TAGS[bucket.type], bucket.cast(pa.binary()), b"\x00" + _NAME_TAGS[key.type],
        key.cast(pa.binary()), b"\x00", b"")


def object_keys(batch: pa.RecordBatch, options: Options) -> list[bytes]:
    """Each row's object Ledger key (to route it to its shard): in bulk when its names allow,
    else row by row, where a bad name raises ``InvalidArgumentError``."""
    bucket, key = _narrow(batch.column("bucket")), _narrow(batch.column("key"))
    if _name_ok(bucket, options.max_key_bytes) and _name_ok(key, options.max_key_bytes):
        return _object_keys(bucket, key).to_pylist()
    return [checked_key(b, k, options) for b, k in zip(names(bucket), names(key))]


def change_rows(changes) -> pa.Table:
    """The run rows of checked changes: ``(Change, value)`` pairs (puts)."""
    cols = list(zip(*((c.lkey, v, c.vhash, jfmt.pack_indexes(c.indexes), c.expiry, c.extra)
                      for c, v in changes))) or [[]] * len(RUN_SCHEMA)
    return pa.Table.from_arrays([pa.array(col, f.type) for col, f in zip(cols, RUN_SCHEMA)],
                                schema=RUN_SCHEMA)


def sorted_run(run: pa.Table, first_sqn: int, last_modified: int) -> tuple[pa.Table, pa.Table]:
    """A run sorted by key (stable: of two rows with one key, the later gets the higher SQN
    and wins), with SQNs from ``first_sqn`` up: ``(journal rows, Ledger rows)``, the Ledger
    rows sorted and deduplicated, index entries included."""
    run = run.take(pc.sort_indices(run, [("lkey", "ascending")]))
    n = run.num_rows
    sqn = pa.array(np.arange(first_sqn, first_sqn + n, dtype=np.uint64))
    modified = pa.array(np.full(n, last_modified, dtype=np.int64))
    journal = pa.Table.from_arrays([
        sqn, pa.array(np.full(n, OP_PUT, dtype=np.uint8)), run.column("lkey"),
        run.column("value"), run.column("indexes"), run.column("expiry"), run.column("extra"),
        modified, pa.nulls(n, pa.binary()),
    ], schema=jfmt.JOURNAL_SCHEMA)
    ledger = pa.Table.from_arrays([
        run.column("lkey"), sqn, pa.array(np.full(n, ACTIVE, dtype=np.uint8)),
        run.column("expiry"), run.column("hash"),
        pc.binary_length(run.column("value")).cast(pa.uint64()), modified, run.column("extra"),
    ], schema=LEDGER_SCHEMA)
    with_terms = pc.is_valid(run.column("indexes"))
    if pc.any(with_terms).as_py():
        # Objects with index terms add their index entries (a Python loop over those rows).
        rows = LedgerRows()
        for rec in jfmt.records(journal.filter(with_terms).combine_chunks().to_batches()[0],
                                "bulk write"):
            rows.add_record(rec)
        ledger = pa.concat_tables([ledger.filter(pc.invert(with_terms)),
                                   pa.Table.from_batches([rows.to_batch()])])
    return journal, sort_and_dedupe(ledger)


def journal_slices(journal: pa.Table, max_bytes: int) -> list[pa.Table]:
    """``journal`` cut into consecutive slices of about ``max_bytes`` of keys and values."""
    size = (pc.binary_length(journal.column("value")).to_numpy(zero_copy_only=False)
            + pc.binary_length(journal.column("lkey")).to_numpy(zero_copy_only=False))
    bounds = size_cuts(size, max_bytes) + [journal.num_rows]
    return [journal.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
