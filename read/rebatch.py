"""Arrow tables of any sizes, handed on as tables of a fixed number of rows."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pyarrow as pa


async def rebatched(tables: AsyncIterator[pa.Table], rows: int) -> AsyncIterator[pa.Table]:
    """The rows of ``tables``, in order, ``rows`` at a time (fewer only at the end). Closing
    this closes ``tables``."""
    held: list[pa.Table] = []
    count = 0
    async with contextlib.aclosing(tables) as found:
        async for table in found:
            held.append(table)
            count += table.num_rows
            if count < rows:
                continue
            joined = pa.concat_tables(held)
            full = count - count % rows
            for start in range(0, full, rows):
                yield joined.slice(start, rows)
            held, count = [joined.slice(full)], count - full
    if count:
        yield pa.concat_tables(held)
