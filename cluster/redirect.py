"""Following a sharded store's layout when it changes under a handle.

A split replaces a shard by two children, and a move restarts a shard's Bookie on another
node: a handle made before holds Bookies that are closed, or a shard map that sends a key to a
shard that no longer owns it. Such a call fails before it changes anything: the closed Bookie
refuses it (``StoreClosedError``), or the shard refuses a key it does not own
(``WrongShardError``). The handle then finds the current layout (:func:`find_layout`) and
sends the call again, so the caller never sees the change.

What is followed (:func:`followed`) is only what proves nothing was changed: a closed or
gone Bookie (a Bookie that closes finishes the writes it took first), or a wrong shard. A call
whose outcome is unknown (``StoreUnavailableError``: the Bookie died during it) is never sent
again, nor one that a cross-shard batch committed (:data:`COMMITTED`).

While a handle splits or moves a shard, it marks the shard ``reshaping/<prefix>`` at the
store's root (:func:`marked`): a handle that meets the closed shard then waits for the new
layout (:func:`wait_for_layout`) rather than fail. A mark older than :data:`CHANGE_WAIT_S`
(its handle died) is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import NamedTuple

from ..errors import ObjectStoreError, StoreClosedError, StoreUnavailableError, WrongShardError
from ..files.store import NotFound, ObjectStore
from ..manifest.shard_map import ShardMap, read_shard_map
from ..options import Options
from .split import settle_splits
from .txn import COMMITTED

#: Times one call follows a changed layout before its error is raised.
REDIRECTS = 3
#: How long a call waits for a shard being split or moved (a mark older is ignored).
CHANGE_WAIT_S = 120.0
#: Where a shard being split or moved is marked, under the store's root.
RESHAPING = "reshaping/"
#: How often a waiting call looks for the new layout.
POLL_S = 0.2


class Layout(NamedTuple):
    """The shards a handle sends calls to: one Bookie's handle per shard of ``shard_map``."""

    stores: tuple
    shard_map: ShardMap


def followed(exc: BaseException) -> bool:
    """Whether a call that raised ``exc`` changed nothing because the layout it used is gone
    (then it is sent again on the current one)."""
    if isinstance(exc, WrongShardError):
        return True
    return (isinstance(exc, StoreClosedError) and not isinstance(exc, StoreUnavailableError)
            and not getattr(exc, COMMITTED, False))


async def find_layout(url: str, name: str | None, options: Options, current: Layout,
                      runtime) -> Layout | None:
    """The layout the store runs with now, if it differs from ``current``: its newest shard
    map (a split published, see :func:`~.split.settle_splits`) and each shard's running
    Bookie, found by name in ``runtime`` (a :class:`~.runtime.Runtime`). ``None`` when nothing
    changed, or when the Bookies cannot be found (a store opened without ``name``: only the
    handle that split or moved reaches them)."""
    root = ObjectStore.from_url(url, options)
    found = await read_shard_map(root)
    shard_map = current.shard_map if found is None else await settle_splits(root, found, options)
    if name is None:
        return None
    return await runtime.running_bookies(name, shard_map, current)


@contextlib.asynccontextmanager
async def marked(root: ObjectStore, prefix: str, clock):
    """Mark the shard at ``prefix`` as being split or moved while the block runs."""
    await root.put_async(RESHAPING + prefix, repr(clock()).encode())
    try:
        yield
    finally:
        with contextlib.suppress(ObjectStoreError):  # a mark left behind expires
            await root.delete_async(RESHAPING + prefix)


async def _reshaping(root: ObjectStore, prefixes, now: float) -> bool:
    """Whether a shard of ``prefixes`` is marked, and the mark is recent."""
    for prefix in prefixes:
        try:
            at = float(await root.get_async(RESHAPING + prefix))
        except (NotFound, ValueError, ObjectStoreError):  # unmarked, or unknown: no wait
            continue
        if now - at < CHANGE_WAIT_S:
            return True
    return False


async def wait_for_layout(url: str, name: str | None, options: Options, current: Layout,
                          clock, runtime) -> Layout | None:
    """:func:`find_layout`, waited for while a shard of ``current`` is marked as being split
    or moved (at most :data:`CHANGE_WAIT_S`)."""
    root = ObjectStore.from_url(url, options)
    deadline = clock() + CHANGE_WAIT_S
    while True:
        found = await find_layout(url, name, options, current, runtime)
        if (found is not None or clock() > deadline
                or not await _reshaping(root, current.shard_map.prefixes, clock())):
            return found
        await asyncio.sleep(POLL_S)
