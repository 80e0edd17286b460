"""Whether a shard is quiet: no live writer, no prepared cross-shard part. What is done to a
sharded store without Ray (a checkpoint, a split) needs it, as no cut holds writes back."""

from __future__ import annotations

import contextlib

from ..admin.handle import Admin
from ..errors import InvalidArgumentError
from ..files.names import LEASE_PREFIX
from ..files.store import NotFound
from ..manifest import snapshot_leases
from ..manifest.txn_records import TXN_PREFIX, txn_of_part

#: Why a checkpoint without Ray waits for a quiet store, and what to do instead.
CHECKPOINT_ADVICE = ("a checkpoint without Ray would not be a consistent cut; take it through "
                     "the running store (store.checkpoint())")


async def check_quiet(admin: Admin, shard: int, advice: str = CHECKPOINT_ADVICE) -> None:
    """``InvalidArgumentError`` (saying ``advice``) if shard ``shard`` has a live writer, or
    a prepared part."""
    now = admin.clock()
    for meta in await admin.store.list_async(LEASE_PREFIX):
        with contextlib.suppress(NotFound):
            lease = snapshot_leases.decode(await admin.store.get_async(meta.path), meta.path)
            if lease.fresh(now):
                raise InvalidArgumentError(f"shard {shard} is being written: {advice}")
    await check_no_parts(admin, shard)


async def check_no_parts(admin: Admin, shard: int) -> None:
    """``InvalidArgumentError`` if shard ``shard`` holds a prepared cross-shard part."""
    if any(txn_of_part(m.path) for m in await admin.store.list_async(TXN_PREFIX)):
        raise InvalidArgumentError(f"shard {shard} holds a cross-shard batch not yet settled: "
                                   "open the store once to settle it")
