"""Same answers: the same operations on a 4-shard store, a plain store and a dict give the same
results, folds and index queries included."""

import uuid

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

import leveled_ray as lr

pytestmark = pytest.mark.ray

KEYS = st.sampled_from([f"k{i:02d}" for i in range(24)])
VALUES = st.binary(min_size=0, max_size=8)


@pytest.fixture(scope="module")
def stores(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("model")
    sharded = lr.open(f"file://{root}/sharded", shards=4)
    plain = lr.open(f"file://{root}/plain")
    yield sharded, plain
    sharded.close()
    plain.close()


def both(call):
    """``call(store)`` on both stores: each result, or the type of the error it raised."""
    out = []
    for store in Model.stores:
        try:
            out.append(call(store))
        except lr.LeveledError as exc:
            out.append(type(exc))
    return out


class Model(RuleBasedStateMachine):
    stores: tuple = ()

    def __init__(self):
        super().__init__()
        self.bucket = f"m{uuid.uuid4().hex[:8]}"  # each run starts from an empty bucket
        self.model: dict[str, tuple[bytes, int]] = {}  # key -> (value, index term)

    def _expect(self, results, value):
        assert results[0] == results[1] == value, results

    @rule(key=KEYS, value=VALUES, term=st.integers(0, 5), if_absent=st.booleans())
    def put(self, key, value, term, if_absent):
        exists = key in self.model
        results = both(lambda s: s.put(self.bucket, key, value, if_absent=if_absent,
                                       indexes=self._index_change(key, term)) > 0)
        if if_absent and exists:
            self._expect(results, lr.ConditionFailedError)
            return
        self._expect(results, True)
        self.model[key] = (value, term)

    def _index_change(self, key, term):
        old = self.model.get(key)
        removes = [] if old is None or old[1] == term else [("remove", "t_int", old[1])]
        return removes + [("add", "t_int", term)]

    @rule(key=KEYS)
    def delete(self, key):
        old = self.model.pop(key, None)
        indexes = [] if old is None else [("remove", "t_int", old[1])]
        self._expect(both(lambda s: s.delete(self.bucket, key, indexes=indexes) > 0), True)

    @rule(writes=st.dictionaries(KEYS, st.one_of(st.none(), VALUES), min_size=1, max_size=8),
          fail_one=st.booleans())
    def put_many(self, writes, fail_one):
        items, after = [], dict(self.model)
        for key, value in writes.items():
            old = self.model.get(key)
            if value is None:
                indexes = [] if old is None else [("remove", "t_int", old[1])]
                items.append(lr.Delete(self.bucket, key, indexes=indexes))
                after.pop(key, None)
            else:
                items.append(lr.Put(self.bucket, key, value,
                                    indexes=self._index_change(key, 0)))
                after[key] = (value, 0)
        fails = fail_one and any(k in self.model for k in writes)
        if fails:  # a condition that cannot hold: nothing may be written, in any shard
            key = next(k for k in writes if k in self.model)  # first: it sees no other item
            items.insert(0, lr.Put(self.bucket, key, b"x", if_absent=True))
        results = both(lambda s: len(s.put_many(items)))
        self._expect(results, lr.ConditionFailedError if fails else len(items))
        if not fails:
            self.model = after

    @rule(keys=st.lists(KEYS, max_size=10))
    def get_many(self, keys):
        self._expect(both(lambda s: s.get_many([(self.bucket, k) for k in keys])),
                     [self.model.get(k, (None,))[0] for k in keys])

    @rule(lo=st.integers(0, 5), width=st.integers(0, 5))
    def index_query(self, lo, width):
        expected = sorted((t, k) for k, (_, t) in self.model.items() if lo <= t <= lo + width)
        self._expect(both(lambda s: list(s.index_query(self.bucket, "t_int", lo, lo + width,
                                                       return_terms=True))), expected)

    @invariant()
    def folds_agree(self):
        expected = sorted((self.bucket, k, v) for k, (v, _) in self.model.items())
        self._expect(both(lambda s: list(s.fold_objects(self.bucket))), expected)
        self._expect(both(lambda s: [h.size for _, _, h in s.fold_heads(self.bucket)]),
                     [len(v) for _, _, v in expected])


def test_a_sharded_store_answers_as_a_plain_store_and_a_dict(stores):
    Model.stores = stores
    # No shrinking: each step costs calls to two stores, and a failure prints its steps.
    run_state_machine_as_test(Model, settings=settings(
        max_examples=4, stateful_step_count=15, deadline=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate)))
