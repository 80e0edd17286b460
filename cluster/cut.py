"""Consistent cuts of a sharded store: snapshots and checkpoints that hold the same moment of
every shard.

A cut freezes every shard at once (each stops admitting writes and lets the admitted ones
become durable), takes what it needs of each (a snapshot, a checkpoint), then thaws them all.
No shard thaws before every shard froze, so a write sent after another was acknowledged is
never in a cut without it: if the later one is in, it was admitted before its shard froze, so
the earlier one was acknowledged before that, and so before its own shard thawed; had it been
admitted after its shard froze, it could have been acknowledged only after the thaw.

Cross-shard batches: a shard lists the parts it holds prepared when it freezes, once the
prepares under way have ended, and prepares no part until it thaws. So a batch that any shard
holds applied, or that is decided by the time the cut reads its record, was prepared in every
shard before that shard froze, and each lists it or has applied it. The cut reads each listed
batch's commit record: a committed batch is applied by every shard still holding it before
the cut is taken (it is in the cut everywhere); an undecided one is in no cut, since no shard
can apply it while all are frozen. A frozen shard thaws by itself after :data:`HOLD_S`, should
its cutter die; the cutter learns from each shard, as it thaws it, whether the cut still held
it, and gives back a cut one shard left early (it may hold writes the others lack). A shard
frozen by another cut answers busy, and the cut tries again.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..errors import ConflictError
from ..files.names import ulid
from ..files.store import ObjectStore
from ..manifest.txn_records import COMMIT, read_decision

#: A frozen shard thaws by itself after this many seconds.
HOLD_S = 10.0
BUSY = "busy"


class Early(NamedTuple):
    """What a shard may take in the call that freezes it (``take``: see
    :meth:`ShardSide.freeze <leveled_ray.client.shard_side.ShardSide.freeze>`), and how to
    give it back should that attempt of the cut fail (``discard(shard, taken)``)."""

    take: tuple
    discard: Callable[[int, object], Awaitable]


#: Attempts of a cut whose hold outlasted :data:`HOLD_S` (a shard thawed by itself).
ATTEMPTS = 3


async def cut(store, shards: list, take: Callable[[int], Awaitable],
              early: Early | None = None) -> tuple[list, float]:
    """``take(shard)`` of every shard at one consistent moment; returns what each gave, in
    shard order, and how long the cut held writes (seconds, as the cutter saw it).
    ``shards`` are the shards' :class:`~leveled_ray.client.shard_side.ShardSide` in order;
    ``store`` gives the URL and options of the root, where batches' decisions are read.

    ``early`` (see :meth:`ShardSide.freeze <leveled_ray.client.shard_side.ShardSide.freeze>`)
    lets each shard take its part in the same call that freezes it, when it holds no
    prepared part: taking early is safe, since all that matters is that no shard thaws
    before every shard froze. Every shard then says whether the cut still held it when it
    was thawed: one that thawed by itself first (the cut outlasted :data:`HOLD_S`) may hold
    writes the others lack, so what was taken is given back (``early.discard``) and the cut
    tried again; :class:`ConflictError` after :data:`ATTEMPTS`."""
    for _ in range(ATTEMPTS):
        cut_id, taken, frozen_at = await _hold_and_take(store, shards, take, early)
        held = await asyncio.gather(*(s.thaw(cut_id) for s in shards),
                                    return_exceptions=True)
        if all(h is True for h in held):
            return taken, time.monotonic() - frozen_at
        if early is not None:
            await asyncio.gather(*(early.discard(s, t) for s, t in enumerate(taken)),
                                 return_exceptions=True)
    raise ConflictError(f"a shard admitted writes again before the cut was taken (it held "
                        f"them over {HOLD_S:g}s), {ATTEMPTS} times: nothing was taken")


async def _hold_and_take(store, shards: list, take, early: Early | None) -> tuple:
    """Freeze every shard, apply the committed batches they hold prepared, and take each
    shard's part: ``(cut_id, taken, frozen_at)``. The shards are thawed here only on error."""
    deadline = time.monotonic() + HOLD_S
    backoff = 0.002
    while True:
        cut_id = ulid()
        frozen_at = time.monotonic()
        answers = await asyncio.gather(*(s.freeze(cut_id, HOLD_S, early and early.take)
                                         for s in shards), return_exceptions=True)
        if not any(a == BUSY or isinstance(a, BaseException) for a in answers):
            break
        _thaw(shards, cut_id)
        await asyncio.gather(*(early.discard(s, a[1]) for s, a in enumerate(answers)
                               if isinstance(a, tuple) and a[1] is not None))
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        if time.monotonic() + backoff > deadline:
            raise ConflictError(f"other cuts kept the shards frozen for {HOLD_S:g}s")
        await asyncio.sleep(random.uniform(0, backoff))
        backoff = min(2 * backoff, 0.1)
    try:
        pending = sorted({txn for held, _ in answers for txn in held})
        if pending:
            root = ObjectStore.from_url(store.url, store.options)
            decisions = await asyncio.gather(*(read_decision(root, txn) for txn in pending))
            committed = {txn for txn, d in zip(pending, decisions) if d == COMMIT}
            await asyncio.gather(*(
                s.cut_apply(cut_id, [t for t in held if t in committed])
                for s, (held, _) in zip(shards, answers) if committed & set(held)))
        taken = await asyncio.gather(*(_taken(answers[s][1], take, s) for s in range(len(shards))))
    except BaseException:
        _thaw(shards, cut_id)
        raise
    return cut_id, list(taken), frozen_at


async def _taken(early_taken, take, shard: int):
    return early_taken if early_taken is not None else await take(shard)


def _thaw(shards: list, cut_id: str) -> None:
    for shard in shards:
        shard.thaw_soon(cut_id)
