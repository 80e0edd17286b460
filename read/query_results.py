"""Query results as Arrow batches (the ``*_batches`` forms) and as Python tuples.

Fold results are built column by column from Ledger rows: names are decoded in bulk (see
:class:`~leveled_ray.read.key_ranges.Names`) and only the ``extra`` column (metadata, index terms,
head_only values) is unpacked row by row.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..codec.entries import iter_heads, live_entries, unpack_extra
from .key_ranges import Names

KEYS_SCHEMA = pa.schema([("bucket", pa.string()), ("key", pa.string())])
_TERM = pa.struct([("field", pa.string()), ("term_bin", pa.string()), ("term_int", pa.int64())])
HEADS_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("key", pa.string()), ("sqn", pa.uint64()), ("size", pa.uint64()),
    ("hash", pa.uint64()), ("last_modified", pa.timestamp("ms", tz="UTC")),
    ("expires_at", pa.timestamp("s", tz="UTC")), ("metadata", pa.string()),
    ("indexes", pa.list_(_TERM)), ("value", pa.binary()),
])
OBJECTS_SCHEMA = pa.schema([
    ("bucket", pa.string()), ("key", pa.string()), ("value", pa.binary()),
    ("sqn", pa.uint64()), ("last_modified", pa.timestamp("ms", tz="UTC")),
])


def schema(kind: str, binary_names: bool = False, with_indexes: bool = False) -> pa.Schema:
    """The schema of a fold's Arrow form: ``"keys"``, ``"heads"`` or ``"objects"``."""
    base = {"keys": KEYS_SCHEMA, "heads": HEADS_SCHEMA, "objects": OBJECTS_SCHEMA}[kind]
    if binary_names:
        base = base.set(0, pa.field("bucket", pa.binary())).set(1, pa.field("key", pa.binary()))
    if with_indexes and kind == "objects":
        base = base.append(pa.field("indexes", pa.list_(_TERM)))
    return base


def _terms_column(extras: list[bytes]) -> pa.Array:
    rows = []
    for extra in extras:
        terms = unpack_extra(extra)[1] if extra else ()
        rows.append([{"field": f, "term_bin": t if isinstance(t, str) else None,
                      "term_int": t if isinstance(t, int) else None} for f, t in terms])
    return pa.array(rows, pa.list_(_TERM))


def _timestamps(table: pa.Table) -> pa.Array:
    return table.column("last_modified").cast(pa.timestamp("ms", tz="UTC"))


def keys_batch(table: pa.Table, binary_names: bool) -> pa.RecordBatch:
    buckets, keys = Names(table.column("key").combine_chunks()).arrow(binary_names)
    return pa.RecordBatch.from_arrays([buckets, keys], schema=schema("keys", binary_names))


def heads_batch(table: pa.Table, binary_names: bool) -> pa.RecordBatch:
    buckets, keys = Names(table.column("key").combine_chunks()).arrow(binary_names)
    extras = table.column("extra").to_pylist()
    unpacked = [unpack_extra(e) if e else (b"", (), None) for e in extras]
    expiry = table.column("expiry").combine_chunks().cast(pa.int64())
    expires = pc.if_else(pc.equal(expiry, 0), pa.scalar(None, pa.int64()), expiry)
    return pa.RecordBatch.from_arrays([
        buckets, keys, table.column("sqn").combine_chunks(), table.column("size").combine_chunks(),
        table.column("hash").combine_chunks(), _timestamps(table).combine_chunks(),
        expires.cast(pa.timestamp("s", tz="UTC")),
        pa.array([m.decode() if m else None for m, _, _ in unpacked], pa.string()),
        _terms_column(extras),
        pa.array([v for _, _, v in unpacked], pa.binary()),
    ], schema=schema("heads", binary_names))


def objects_batch(table: pa.Table, values: pa.Array, binary_names: bool,
                  with_indexes: bool) -> pa.RecordBatch:
    buckets, keys = Names(table.column("key").combine_chunks()).arrow(binary_names)
    columns = [buckets, keys, values,
               table.column("sqn").combine_chunks(), _timestamps(table).combine_chunks()]
    if with_indexes:
        columns.append(_terms_column(table.column("extra").to_pylist()))
    return pa.RecordBatch.from_arrays(columns,
                                      schema=schema("objects", binary_names, with_indexes))


def python_names(table: pa.Table) -> tuple[list, list]:
    """Buckets and keys as the ``str`` / ``bytes`` values they were written as."""
    return Names(table.column("key").combine_chunks()).python()


def python_heads(table: pa.Table, now_s: float) -> Iterator[tuple]:
    """``(bucket, key, Head)`` rows, each made as it is asked for (see
    :func:`~leveled_ray.codec.entries.iter_heads`)."""
    buckets, keys = python_names(table)
    cols = [table.column(c).to_pylist() for c in
            ("sqn", "status", "expiry", "hash", "size", "last_modified", "extra")]
    return zip(buckets, keys, iter_heads(live_entries(list(zip(*cols)), now_s)))
