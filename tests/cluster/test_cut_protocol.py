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


class HoldingShard(Shard):
    """A shard that holds prepared parts ``held`` when it freezes: the cut applies the
    committed ones (``applied``) before it takes the shard's part."""

    def __init__(self, number: int, held: list[str]):
        super().__init__(number, 0)
        self.held, self.applied = held, []

    async def freeze(self, cut_id, hold_s, take):
        self.frozen = cut_id
        return list(self.held), None  # parts held: taken after they are settled

    async def cut_apply(self, cut_id, txns) -> None:
        assert self.frozen == cut_id
        self.applied += txns


def test_a_cut_applies_the_committed_parts_it_holds_and_no_other(tmp_path):
    from leveled_ray.files.store import ObjectStore
    from leveled_ray.manifest.txn_records import ABORT, COMMIT, decide
    from leveled_ray.options import Options

    store = Store([])
    store.url, store.options = f"file://{tmp_path}/db", Options()
    root = ObjectStore.from_url(store.url, store.options)
    store._shards = [HoldingShard(0, ["committed", "aborted"]), HoldingShard(1, ["open"])]

    async def run():
        assert await decide(root, "committed", COMMIT) == COMMIT
        assert await decide(root, "aborted", ABORT) == ABORT

        async def take(shard):
            return ("taken", shard, list(store._shards[shard].applied))
        return await cut(store, store._shards, take)

    taken, _ = asyncio.run(run())
    # "open" has no record: undecided, so not in the cut (its batch is in no shard yet).
    assert [s.applied for s in store._shards] == [["committed"], []]
    assert taken == [("taken", 0, ["committed"]), ("taken", 1, [])]
