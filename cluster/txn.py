"""A ``put_many`` across shards: prepare everywhere, decide once, apply everywhere.

1. Every shard involved prepares its part at once (:meth:`ShardSide.prepare
   <leveled_ray.client.shard_side.ShardSide.prepare>`): its keys locked, its conditions checked,
   the part durable in the shard's store. Nothing is visible yet.
2. If one shard's conditions fail, every prepared part is dropped and the failure raised. If
   another batch holds a key (``busy``), the parts are dropped and the batch tried again after
   a short random backoff, up to ``txn_timeout_s``.
3. Once all are prepared, the commit record is created at the store's root
   (:func:`~leveled_ray.manifest.txn_records.decide`): from then on the batch is committed,
   whoever dies.
4. Every shard applies its part as one durable group, then unlocks its keys.

A client that dies before step 3 leaves parts that their shards abort after
``txn_timeout_s``; after it, parts that their shards apply (at once, or when they reopen).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import time

from ..client.shard_side import ShardSide
from ..client.transactions import Transactions
from ..codec import Head, written
from ..errors import ConflictError, ObjectStoreError, StoreClosedError
from ..files.names import ulid
from ..files.store import ObjectStore
from ..manifest.txn_records import COMMIT, decide, record_name
from .fanout import in_input_order, shard_groups

BUSY = "busy"
FIRST_BACKOFF_S = 0.002
MAX_BACKOFF_S = 0.2


#: The attribute set on the error of a batch that committed but is not applied everywhere yet:
#: it is never sent again (see :mod:`.redirect`).
COMMITTED = "batch_committed"


async def put_across(store, layout, changes: list, values: list, groups: dict,
                     busy_is_conflict: bool = False) -> list[int]:
    """Write checked ``changes`` and their ``values`` (``groups``: each shard's positions in
    ``layout``, see :class:`~.redirect.Layout`) atomically across the shards of ``store``;
    returns each written change's SQN (its shard's), in input order: a transaction's checks
    come last and have none. ``busy_is_conflict``: a key held by another batch raises
    ``ConflictError`` at once, rather than after retries."""
    shards = {shard: layout.stores[shard] for shard in groups}
    parts = {shard: ([changes[i] for i in where], [values[i] for i in where])
             for shard, where in groups.items()}
    deadline = time.monotonic() + store.options.txn_timeout_s
    backoff = FIRST_BACKOFF_S
    while True:
        txn = ulid()
        answers = await asyncio.gather(*(ShardSide(shards[s]).prepare(txn, store.url, *part)
                                         for s, part in parts.items()), return_exceptions=True)
        prepared = [s for s, a in zip(parts, answers) if _prepared(a)]
        if len(prepared) == len(parts):
            break
        await _abort(shards, prepared, txn)
        for answer in answers:
            if not _prepared(answer) and answer != BUSY:
                raise answer
        if busy_is_conflict:
            raise ConflictError("not written: another cross-shard batch holds some of its keys")
        if time.monotonic() + backoff > deadline:
            raise ConflictError(f"not written: other cross-shard batches held its keys for "
                                f"{store.options.txn_timeout_s:g}s")
        await asyncio.sleep(random.uniform(0, backoff))
        backoff = min(2 * backoff, MAX_BACKOFF_S)
    root = ObjectStore.from_url(store.url, store.options)
    # Each shard's part number, by label (a shard's name for good: indexes shift in a split),
    # noted with its keys.
    labels = layout.shard_map.labels
    numbers = {labels[s]: answer for s, answer in zip(parts, answers)
               if written(parts[s][0])}  # a shard that only checks holds no part to see
    if await decide(root, txn, COMMIT, numbers) != COMMIT:  # a shard gave up and aborted
        await _abort(shards, list(parts), txn)
        raise ConflictError("not written: a shard aborted the batch after waiting "
                            f"{store.options.txn_timeout_s:g}s for its decision")
    applied = await asyncio.gather(*(ShardSide(shards[s]).commit_part(txn, numbers)
                                     for s in parts), return_exceptions=True)
    failed = [s for s, a in zip(parts, applied) if isinstance(a, BaseException)]
    if failed:
        error = StoreClosedError(f"the batch is committed, but shard(s) {failed} could not "
                                 f"apply it yet ({applied[list(parts).index(failed[0])]}); "
                                 "each applies it when it reopens")
        setattr(error, COMMITTED, True)
        raise error
    # Every part is applied: no one reads the record again. Its delete is off the caller's
    # path; one that never happens (the process ended) is left for lr.gc(url).
    _RECORD_DELETES.submit(_delete_quietly, root, record_name(txn))
    out = [0] * len(changes)
    for where, sqns in zip(groups.values(), applied):
        for i, sqn in zip(where, sqns):  # a shard's writes come before its checks
            out[i] = sqn
    return out[:len(written(changes))]


_RECORD_DELETES = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lr-txn-records")


class ShardedTransactions(Transactions):
    """What a sharded store's transactions call (see :mod:`leveled_ray.client.transaction`):
    reads of versions from each shard, and commits through ``_write_changes``."""

    async def _read_versions_async(self, lkeys: list[bytes], values: bool
                                   ) -> tuple[list[Head | None], list | None]:
        """A transaction's read (see :meth:`Store._read_versions_async
        <leveled_ray.client.store.Store._read_versions_async>`): one call to each shard
        involved, at once; each shard's keys as of one moment of its own."""
        async def read(layout):  # a redirect.Layout
            groups = shard_groups(lkeys, layout.shard_map)
            found = await asyncio.gather(*(layout.stores[s]._read_versions_async(
                [lkeys[i] for i in where], values) for s, where in groups.items()))
            heads = in_input_order(len(lkeys), groups, [h for h, _ in found])
            got = in_input_order(len(lkeys), groups, [v for _, v in found]) if values else None
            return heads, got
        return await self._routed(read)

    async def _commit_changes_async(self, changes: list, values: list,
                                    ranges: list = ()) -> list[int]:
        """A transaction's commit: its writes (conditional on their versions), then its
        checks, which have no values; each key range it read (``(lo, hi, found, kind,
        owners)``: ``owners`` the object keys that route each found key, see
        :func:`~leveled_ray.codec.range_check`) is checked by every shard, for its own keys.
        A key another batch holds is a conflict at once: that batch is about to change it."""
        values = values + [None] * (len(changes) - len(values))
        return await self._write_changes(changes, values, ranges, busy_is_conflict=True)


def _delete_quietly(root: ObjectStore, name: str) -> None:
    with contextlib.suppress(ObjectStoreError):
        root.delete(name)


def _prepared(answer) -> bool:
    """Whether a shard's answer to prepare is a part number (``(epoch, count)``)."""
    return isinstance(answer, tuple)


async def _abort(shards: dict, prepared: list[int], txn: str) -> None:
    """Drop the parts prepared so far (a shard that cannot be reached drops its own part once
    ``txn_timeout_s`` passes, or when it reopens)."""
    await asyncio.gather(*(ShardSide(shards[s]).abort_part(txn) for s in prepared),
                         return_exceptions=True)
