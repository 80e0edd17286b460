"""The writes in flight of a process's transaction commits, as later transactions read them
(pure: see ``client/in_flight_writes.py``)."""

import asyncio

import leveled_ray as lr
from leveled_ray.client.in_flight_writes import InFlightWrites
from leveled_ray.codec import check_change, delete_change, put_change

OPTIONS = lr.Options()


def put(key: str, value: bytes = b"v"):
    return put_change("b", key, value, OPTIONS, 0.0)[0]


def key(name: str) -> bytes:
    return put(name).lkey


def test_the_newest_write_in_flight_is_read_until_its_commit_answers():
    writes = InFlightWrites()
    first = writes.begin([put("a"), put("b")], [b"a1", b"b1"], ())
    second = writes.begin([put("a"), check_change(key("c"), 3)], [b"a2"], ())
    found = writes.reads([key("a"), key("b"), key("c")])
    assert {k: (r.token, v) for k, (r, v) in found.items()} == {
        key("a"): (second, b"a2"), key("b"): (first, b"b1")}  # a check writes nothing
    writes.end(first, 10)  # landed: a 10, b 11
    assert writes.landed(first) and set(writes.reads([key("a"), key("b")])) == {key("a")}
    assert writes.missed([key("b"), key("b"), key("c")], [7, 11, None]) == [key("b")]
    assert asyncio.run(writes.sqn_of(found[key("b")][0])) == 11


def test_a_failed_commit_dooms_the_commits_that_read_its_writes():
    writes = InFlightWrites()
    root = writes.begin([put("a")], [b"a1"], ())
    (read, _), = writes.reads([key("a")]).values()
    reader = writes.begin([put("a"), put("b")], [b"a2", b"b2"], [read.token])
    (read, _), = writes.reads([key("b")]).values()
    grandchild = writes.begin([put("c")], [b"c3"], [read.token])
    other = writes.begin([put("d")], [b"d1"], ())
    writes.end(root, None)  # not written: so neither are the writes read from it
    assert set(writes.reads([key(k) for k in "abcd"])) == {key("d")}
    assert writes.begin([put("e")], [b"e"], [root]) is None  # refused before it is sent
    writes.end(reader, None)  # as the Bookie answers the doomed commit
    writes.end(grandchild, None)
    writes.end(other, 5)
    assert asyncio.run(writes.sqn_of(read)) is None and not writes.landed(root)
    assert writes.reads([key("d")]) == {} and writes.landed(other)


def test_an_older_write_is_read_again_once_a_newer_one_is_doomed():
    writes = InFlightWrites()
    older = writes.begin([put("a")], [b"a1"], ())
    failed = writes.begin([put("b")], [b"b1"], ())
    (read_b, _), = writes.reads([key("b")]).values()
    writes.begin([put("a")], [b"a2"], [read_b.token])  # read b in flight, wrote a
    writes.end(failed, None)
    (read_a, value), = writes.reads([key("a")]).values()
    assert (read_a.token, value) == (older, b"a1")


def test_deletes_and_writes_with_a_lifetime_in_flight_are_not_read():
    writes = InFlightWrites()
    writes.begin([put("a")], [b"a1"], ())
    writes.begin([delete_change("b", "a", OPTIONS)[0]], [None], ())
    writes.begin([put_change("b", "c", b"v", OPTIONS, 0.0, ttl=60)[0]], [b"c1"], ())
    assert writes.reads([key("a"), key("c")]) == {}
