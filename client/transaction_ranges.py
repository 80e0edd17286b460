"""A transaction's reads of key ranges: folds over a bucket's keys and index queries. Under
``serializable`` each range joins the read set whole (a range check at commit: see
:func:`~leveled_ray.codec.range_check`), so an object added to it or removed is a conflict."""

from __future__ import annotations

import abc
import re

from ..codec import RANGE_OF_KEYS, RANGE_OF_OBJECTS, Head, checked_key
from ..codec.keys import index_key, object_key, split_object_key
from ..errors import InvalidArgumentError
from ..read.key_ranges import index_range, object_range
from ..read.queries import check_index_query

SNAPSHOT, SERIALIZABLE = "snapshot", "serializable"
#: A bucket or a key, as it was written.
Name = str | bytes


class RangeReads:
    """The range reads of :class:`~.transaction.Transaction`, which supplies the rest."""

    async def fold_heads_async(self, bucket, start=None,
                               end=None) -> list[tuple[Name, Name, Head]]:
        """``(bucket, key, Head)`` of every live object of ``bucket`` from ``start`` to
        ``end`` (both included, either open) as the transaction sees it, in key order. Under
        ``serializable`` the range is checked at commit: an object added to it, removed or
        written since the read is a conflict. Cost: a fold of the store (a snapshot's); the
        range is held in memory whole."""
        self._enter()
        try:
            return list((await self._range(bucket, start, end)).values())
        finally:
            self._user.release()

    async def fold_keys_async(self, bucket, start=None, end=None) -> list[tuple[Name, Name]]:
        """``(bucket, key)`` of every live object in the range, as :meth:`fold_heads_async`."""
        return [(b, k) for b, k, _ in await self.fold_heads_async(bucket, start, end)]

    async def fold_objects_async(self, bucket, start=None,
                                 end=None) -> list[tuple[Name, Name, bytes]]:
        """``(bucket, key, value)`` of every live object in the range, as
        :meth:`fold_heads_async`. Cost: that, and a read of the values it did not write."""
        self._enter()
        try:
            rows = await self._range(bucket, start, end)
            await self._read([k for k in rows if k not in self._writes], values=True)
            return [(b, k, self._writes[lk][1] if lk in self._writes else self._values[lk])
                    for lk, (b, k, _) in rows.items()]
        finally:
            self._user.release()

    def _reader(self):
        """What folds and index queries read: the snapshot, or the store as it is now."""
        return self._view() if self.isolation == SNAPSHOT else _now(self.store)

    async def _range(self, bucket, start, end) -> dict[bytes, tuple]:
        await self._expired()
        if bucket is None:
            raise InvalidArgumentError("a transaction folds over one bucket at a time")
        lo, hi = object_range(bucket, start, end, max_key_bytes=self.store.options.max_key_bytes)
        options = self.store.options

        async def fold() -> dict[bytes, tuple]:
            source = await self._reader()
            return {checked_key(b, k, options): (b, k, h)
                    async for b, k, h in source.fold_heads_async(bucket, start, end)}

        def versions(rows: dict) -> list[tuple[bytes, int]]:
            return [(lk, row[2].sqn) for lk, row in rows.items()]

        async def again() -> list[tuple[bytes, int]]:
            return versions(await fold())

        rows = await fold()
        if self.isolation == SERIALIZABLE:
            self._moments += 2
            found = versions(rows)
            self._ranges.append(((lo, hi, found, RANGE_OF_OBJECTS, [k for k, _ in found]),
                                 again))
        for lkey, (change, _) in self._writes.items():
            if lo <= lkey < hi:
                head = self._own_head(change)
                if head is None:
                    rows.pop(lkey, None)
                else:
                    rows[lkey] = (*split_object_key(lkey), head)
        return {k: rows[k] for k in sorted(rows)}

    async def index_query_async(self, bucket, field: str, start, end, *,
                                return_terms: bool = False, term_regex=None, start_key=None,
                                max_results: int | None = None) -> list:
        """The keys (or ``(term, key)`` pairs) of ``bucket`` whose ``field`` holds a term from
        ``start`` to ``end``, in (term, key) order (see ``Store.index_query``). Under
        ``serializable`` the whole term range is checked at commit (``term_regex`` and
        ``max_results`` notwithstanding): an entry added to it or removed since is a
        conflict. A transaction that wrote to ``bucket`` cannot query its indexes
        (``InvalidArgumentError``): its own index changes are not in the answer. Cost: an
        index query of the store (a snapshot's) over the whole term range."""
        self._enter()
        try:
            await self._expired()
            check_index_query(field, start, end, term_regex, max_results)
            lo, hi = object_range(bucket, max_key_bytes=self.store.options.max_key_bytes)
            if any(lo <= k < hi for k in self._writes):
                raise InvalidArgumentError(
                    "a transaction cannot query the indexes of a bucket it wrote to")

            async def query() -> list:
                source = await self._reader()
                return [pair async for batch in _batches(source.index_query_async(
                    bucket, field, start, end, return_terms=True, start_key=start_key))
                    for pair in batch]

            def entries(pairs: list) -> list[tuple[bytes, int]]:
                return [(index_key(bucket, field, t, k), 0) for t, k in pairs]

            async def again() -> list[tuple[bytes, int]]:
                return entries(await query())

            pairs = await query()
            if self.isolation == SERIALIZABLE:
                self._moments += 2
                ilo, ihi = index_range(bucket, field, start, end, start_key,
                                       max_key_bytes=self.store.options.max_key_bytes)
                self._ranges.append(((ilo, ihi, entries(pairs), RANGE_OF_KEYS,
                                      [object_key(bucket, k) for _, k in pairs]), again))
            if term_regex is not None:
                pattern = re.compile(term_regex) if isinstance(term_regex, str) else term_regex
                pairs = [(t, k) for t, k in pairs if pattern.search(t)]
            pairs = pairs if max_results is None else pairs[:max_results]
            return pairs if return_terms else [k for _, k in pairs]
        finally:
            self._user.release()

    @abc.abstractmethod
    def fold_heads(self, bucket, start=None, end=None) -> list[tuple[Name, Name, Head]]: ...

    @abc.abstractmethod
    def fold_keys(self, bucket, start=None, end=None) -> list[tuple[Name, Name]]: ...

    @abc.abstractmethod
    def fold_objects(self, bucket, start=None, end=None) -> list[tuple[Name, Name, bytes]]: ...

    @abc.abstractmethod
    def index_query(self, bucket, field: str, start, end, *, return_terms: bool = False,
                    term_regex=None, start_key=None, max_results: int | None = None) -> list: ...


async def _now(store):
    """The store itself as what a transaction folds and queries (as :meth:`Transaction._view`
    is the snapshot)."""
    return store


async def _batches(found):
    """The batches of an index query: a snapshot answers an async iterator of lists, a
    sharded snapshot of items (see :meth:`Queries.index_query_async`)."""
    async for item in found:
        yield item if isinstance(item, list) else [item]
