"""Ledger key encoding and input validation (no Ray)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leveled_ray as lr
from leveled_ray import codec

part = st.one_of(st.binary(max_size=20), st.text(max_size=20),
                 st.integers(min_value=-(2**63), max_value=2**63 - 1))
# Order within one type is what the store relies on (bytes keys with bytes, str with str).
same_typed = st.one_of(
    st.tuples(st.binary(max_size=12), st.binary(max_size=12)),
    st.tuples(st.text(max_size=12), st.text(max_size=12)),
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
)


@given(st.lists(part, min_size=1, max_size=4))
def test_key_round_trip(parts):
    encoded = codec.encode_key(codec.TAG_INDEX, *parts)
    assert codec.decode_key(encoded) == (codec.TAG_INDEX, *parts)


def _order_key(value):
    return value.encode("utf-8") if isinstance(value, str) else value


@given(same_typed, same_typed)
def test_byte_order_is_tuple_order(a, b):
    if type(a[0]) is not type(b[0]):
        return
    ka, kb = codec.encode_key(b"o", *a), codec.encode_key(b"o", *b)
    ta, tb = tuple(map(_order_key, a)), tuple(map(_order_key, b))
    assert (ka < kb) == (ta < tb)
    assert (ka == kb) == (ta == tb)


def test_str_and_bytes_keys_are_distinct():
    assert codec.object_key("b", "k") != codec.object_key(b"b", b"k")


@pytest.mark.parametrize("bucket,key,value,message", [
    ("", "k", b"v", "bucket must not be empty"),
    ("b", b"", b"v", "key must not be empty"),
    (1, "k", b"v", "bucket must be str or bytes"),
    ("b", "k", "text", "value must be bytes"),
    ("b", "\ud800", b"v", "not valid unicode"),
    ("b", "k" * 5000, b"v", "over the limit"),
])
def test_bad_names_and_values(bucket, key, value, message):
    with pytest.raises(lr.InvalidArgumentError, match=message):
        codec.put_change(bucket, key, value, lr.Options(), 0.0)


def test_value_size_limit():
    opts = lr.Options(max_value_bytes=10)
    codec.put_change("b", "k", b"x" * 10, opts, 0.0)
    with pytest.raises(lr.InvalidArgumentError, match="max_value_bytes"):
        codec.put_change("b", "k", b"x" * 11, opts, 0.0)


@pytest.mark.parametrize("indexes,message", [
    ([("add", "city", "x")], "must end in _bin or _int"),
    ([("add", "age_int", "x")], "takes int terms"),
    ([("add", "city_bin", 3)], "takes str terms"),
    ([("upsert", "city_bin", "x")], "must be 'add' or 'remove'"),
    ([("add", "city_bin")], "is not \\(op, field, term\\)"),
    ("city_bin", "list of"),
])
def test_bad_indexes(indexes, message):
    with pytest.raises(lr.InvalidArgumentError, match=message):
        codec.check_indexes(indexes)


def test_conditions_and_ttl_validation():
    opts = lr.Options()
    with pytest.raises(lr.InvalidArgumentError, match="not both"):
        codec.put_change("b", "k", b"v", opts, 0.0, if_sqn=3, if_absent=True)
    with pytest.raises(lr.InvalidArgumentError, match="if_sqn"):
        codec.put_change("b", "k", b"v", opts, 0.0, if_sqn=-1)
    with pytest.raises(lr.InvalidArgumentError, match="ttl"):
        codec.put_change("b", "k", b"v", opts, 0.0, ttl=0)
    with pytest.raises(lr.InvalidArgumentError, match="metadata"):
        codec.put_change("b", "k", b"v", opts, 0.0, metadata={"x": object()})
    change, _ = codec.put_change("b", "k", b"v", opts, 100.0, ttl=5, if_absent=True)
    assert change.expiry == 105 and change.condition == codec.IF_ABSENT
    # An absolute expiry, as a copy keeps it: the same second whatever the time now.
    for now in (100.0, 100.7, 129.9):
        change, _ = codec.make_change(lr.Put("b", "k", b"v", expires_at=130.0), opts, now)
        assert change.expiry == 130
    for bad in (float("nan"), 0, -1.0, True, "130", 2.0**40):
        with pytest.raises(lr.InvalidArgumentError, match="expires_at"):
            codec.make_change(lr.Put("b", "k", b"v", expires_at=bad), opts, 100.0)
    with pytest.raises(lr.InvalidArgumentError, match="not both"):
        codec.make_change(lr.Put("b", "k", b"v", ttl=5, expires_at=130.0), opts, 100.0)


def test_options_are_validated():
    with pytest.raises(lr.InvalidArgumentError, match="compression"):
        lr.Options(compression="snappy")
    with pytest.raises(lr.InvalidArgumentError, match="push_keys"):
        lr.Options(ledger=dict(push_keys=0))
    with pytest.raises(lr.InvalidArgumentError, match="unknown option"):
        lr.Options().replace(colour="blue")
    assert lr.Options().replace(cache_size=0).cache_size == 0


_NAMES = st.one_of(st.text(max_size=20), st.binary(max_size=20), st.just("\ud800"),
                   st.just("a\x00b"), st.integers())


_STR_NAMES = st.one_of(st.sampled_from(["b", "k", "", "\u00e9t\u00e9", "a\x00b", "\ud800",
                                          "x" * 16, "y" * 17, "\u00e9" * 9]),
                      st.text(max_size=10))
_PLAIN_BATCHES = st.lists(st.tuples(_STR_NAMES, _STR_NAMES), max_size=8)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.lists(st.one_of(st.tuples(_NAMES, _NAMES), st.lists(_NAMES, max_size=3)),
                          max_size=5),
                 _PLAIN_BATCHES))
def test_checked_keys_gives_what_checked_key_gives_pair_by_pair(pairs):
    """The many-key path (a batch of plain str pairs keyed as columns, any other pair by
    pair) gives the same keys and refuses the same input as checking each pair."""
    options = lr.Options(max_key_bytes=16)

    def one_by_one():
        out = []
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise lr.InvalidArgumentError("not a pair")
            out.append(codec.checked_key(*pair, options))
        return out

    outcomes = []
    for run in (one_by_one, lambda: codec.checked_keys(pairs, options)):
        try:
            outcomes.append(run())
        except lr.InvalidArgumentError:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1]


def test_a_batch_of_plain_str_pairs_is_keyed_as_columns():
    """The column path is taken by the batches it is for (so the test above compares it), and
    left by any batch with one pair it cannot key."""
    from leveled_ray.codec.checks import _plain_batch
    pairs = [("b", "k1"), ("c", "\u00e9"), ("b", "k2")]
    assert _plain_batch(pairs, 16) == [codec.checked_key(b, k, lr.Options()) for b, k in pairs]
    for odd in (("b", "a\x00b"), ("b", ""), ["b", "k"], ("b", b"k"), ("b", "x" * 17),
                ("b", "\ud800")):
        assert _plain_batch(pairs + [odd], 16) is None
