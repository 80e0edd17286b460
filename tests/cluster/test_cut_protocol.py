"""The cut protocol (``cluster/cut.py``) against shards that answer as a Bookie does, without
Ray: a cut that a shard stopped holding before it was taken (it thawed by itself after
``HOLD_S``) gives back what it took and is taken again, or fails with nothing taken."""

import asyncio

import pytest

from leveled_ray.cluster.cut import ATTEMPTS, Early, cut
from leveled_ray.errors import ConflictError


class Shard:
    """A shard whose first ``lapses`` cuts end after it thawed by itself."""

    def __init__(self, number: int, lapses: int):
        self.number, self.lapses, self.frozen, self.taken = number, lapses, None, 0

    async def freeze(self, cut_id, hold_s, take):
        assert self.frozen is None
        self.frozen = cut_id
        self.taken += 1
        return [], (self.number, self.taken)  # no prepared part: taken in the same call

    async def thaw(self, cut_id) -> bool:
        held = self.frozen == cut_id and self.lapses == 0
        self.lapses = max(0, self.lapses - 1)
        self.frozen = None
        return held

    def thaw_soon(self, cut_id) -> None:
        self.frozen = None


class Store:
    def __init__(self, lapses: list[int]):
        self._shards = [Shard(s, n) for s, n in enumerate(lapses)]
        self.shards = len(lapses)

    def shard(self, s: int) -> Shard:
        return self._shards[s]


def test_a_cut_a_shard_left_early_is_given_back_and_taken_again():
    store, given_back = Store([0, 1]), []

    async def discard(shard, taken):
        given_back.append(taken)

    taken, _ = asyncio.run(cut(store, store._shards, None, Early(("snapshot",), discard)))
    assert taken == [(0, 2), (1, 2)]  # the second attempt's
    assert sorted(given_back) == [(0, 1), (1, 1)]  # every part of the first


def test_a_cut_that_never_holds_fails_with_nothing_taken():
    store, given_back = Store([ATTEMPTS, 0]), []

    async def discard(shard, taken):
        given_back.append(taken)

    with pytest.raises(ConflictError, match="before the cut was taken"):
        asyncio.run(cut(store, store._shards, None, Early(("snapshot",), discard)))
    assert sorted(given_back) == sorted((s, n) for s in (0, 1) for n in range(1, ATTEMPTS + 1))
