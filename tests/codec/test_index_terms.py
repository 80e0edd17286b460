"""Index-term resolution (pure): what a change writes, given the object's current entry."""

from leveled_ray.codec import (
    ACTIVE,
    OP_DELETE,
    OP_PUT,
    TOMBSTONE,
    Change,
    LedgerEntry,
    entry_to_head,
    pack_extra,
    unpack_extra,
)
from leveled_ray.codec.index_terms import change_entry, held_terms, resolve, resolve_all

NOW = 1_000_000.0
KEY = b"o\x02b\x00\x02k\x00"


def put(*indexes, expiry=0, extra=b""):
    return Change(OP_PUT, KEY, 1, 7, tuple(indexes), expiry, extra)


def entry(terms=(), expiry=0, status=ACTIVE, metadata=b""):
    return LedgerEntry(5, status, expiry, 7, 1, 0, pack_extra(metadata, sorted(terms)))


def test_extra_round_trips_and_plain_metadata_stays_json():
    assert pack_extra(b'{"a":1}') == b'{"a":1}'
    packed = pack_extra(b'{"a":1}', [("f_bin", "x"), ("n_int", -3)], b"val")
    assert unpack_extra(packed) == (b'{"a":1}', (("f_bin", "x"), ("n_int", -3)), b"val")
    head = entry_to_head(5, ACTIVE, 0, 7, 1, 0, packed, now_s=NOW)
    assert head.metadata == {"a": 1} and head.value == b"val"
    assert head.indexes == (("f_bin", "x"), ("n_int", -3))


def test_adds_to_a_new_object_write_every_term():
    out = resolve(put((0, "f_bin", "b"), (0, "f_bin", "a")), None, NOW)
    assert out.indexes == ((0, "f_bin", "a"), (0, "f_bin", "b"))
    assert unpack_extra(out.extra)[1] == (("f_bin", "a"), ("f_bin", "b"))


def test_a_put_without_index_changes_keeps_the_terms_and_writes_no_entries():
    out = resolve(put(extra=b'{"m":2}'), entry({("f_bin", "a")}), NOW)
    assert out.indexes == ()
    assert unpack_extra(out.extra) == (b'{"m":2}', (("f_bin", "a"),), None)


def test_a_replace_removes_only_what_it_names():
    current = entry({("f_bin", "a"), ("f_bin", "b")})
    out = resolve(put((1, "f_bin", "a"), (0, "f_bin", "c")), current, NOW)
    assert out.indexes == ((0, "f_bin", "c"), (1, "f_bin", "a"))
    assert held_terms(change_entry(out, 9, 0), NOW) == {("f_bin", "b"), ("f_bin", "c")}


def test_a_delete_removes_every_held_term():
    current = entry({("f_bin", "a"), ("n_int", 4)})
    out = resolve(Change(OP_DELETE, KEY, 0, 0, (), 0, b""), current, NOW)
    assert out.indexes == ((1, "f_bin", "a"), (1, "n_int", 4))
    assert change_entry(out, 9, 0)[1] == TOMBSTONE


def test_deleted_and_expired_objects_hold_no_terms():
    assert held_terms(entry({("f_bin", "a")}, status=TOMBSTONE), NOW) == set()
    assert held_terms(entry({("f_bin", "a")}, expiry=int(NOW) - 1), NOW) == set()
    out = resolve(put(), entry({("f_bin", "a")}, expiry=int(NOW) - 1), NOW)
    assert out.indexes == () and unpack_extra(out.extra)[1] == ()


def test_a_new_expiry_rewrites_the_terms_so_they_expire_with_the_object():
    current = entry({("f_bin", "a")})
    out = resolve(put(expiry=int(NOW) + 60), current, NOW)
    assert out.indexes == ((0, "f_bin", "a"),) and out.expiry == int(NOW) + 60


def test_changes_in_one_group_see_each_other():
    out = resolve_all([put((0, "f_bin", "a")), put(), Change(OP_DELETE, KEY, 0, 0, (), 0, b"")],
                      lambda key: None, NOW)
    assert out[1].indexes == () and unpack_extra(out[1].extra)[1] == (("f_bin", "a"),)
    assert out[2].indexes == ((1, "f_bin", "a"),)
