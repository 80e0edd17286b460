"""The object store layer: URLs, path confinement, put-if-absent and ranged reads (no Ray)."""

import asyncio
import pickle

import pytest
from support.s3 import S3_BUCKET, s3_options

import leveled_ray as lr
from leveled_ray.files.routed import RoutedStore
from leveled_ray.files.store import NotFound, ObjectStore
from leveled_ray.files.store_config import check_path, parse_url


@pytest.mark.parametrize("path", ["../x", "a/../../b", "/abs", "a//b", "a/./b", "", "a b",
                                  "a/b/", 5])
def test_paths_cannot_escape_the_store(path):
    with pytest.raises(lr.InvalidArgumentError):
        check_path(path)


def test_url_parsing():
    assert parse_url("memory://x") == ("memory", "x", "")
    assert parse_url("file:///tmp/a/") == ("file", "/tmp/a", "")
    assert parse_url("s3://bkt/some/prefix/") == ("s3", "bkt", "some/prefix")
    for bad in ("memory://", "file://host/x", "file:///tmp/a/../b", "s3://", "gs://b/p",
                "s3://b/../p", "file:///tmp/a\0b", "memory://a\nb", "s3://bkt/p\x7f"):
        with pytest.raises(lr.InvalidArgumentError):
            parse_url(bad)


@pytest.fixture(params=["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def object_store(request, tmp_path):
    if request.param == "memory":
        return ObjectStore.from_url(f"memory://os-{tmp_path.name}")
    if request.param == "file":
        return ObjectStore.from_url(f"file://{tmp_path}/os")
    endpoint = request.getfixturevalue("moto_endpoint")
    return ObjectStore.from_url(f"s3://{S3_BUCKET}/os-{tmp_path.name}", s3_options(endpoint))


def test_put_if_absent_get_range_list_delete(object_store):
    s = object_store
    assert s.put_if_absent("d/a", b"hello world")
    assert not s.put_if_absent("d/a", b"other")  # the first write wins, nothing changes
    assert s.get("d/a") == b"hello world"
    assert s.get_range("d/a", 6, 11) == b"world"
    assert s.get_ranges("d/a", [0, 6], [5, 11]) == [b"hello", b"world"]
    for i in range(3):
        s.put_if_absent(f"d/{i:03d}", b"x")
    assert [m.path for m in s.list("d/")] == ["d/000", "d/001", "d/002", "d/a"]
    assert [m.path for m in s.list("d/", offset="d/001")] == ["d/002", "d/a"]
    assert s.head("d/a").size == 11 and s.head("d/missing") is None
    for read in (lambda: s.get("d/missing"), lambda: s.get_range("d/missing", 0, 1),
                 lambda: s.get_ranges("d/missing", [0], [1])):
        with pytest.raises(NotFound):
            read()
    s.delete("d/a")
    s.delete("d/a")  # deleting a missing object is fine
    assert s.head("d/a") is None
    assert s.stats.puts >= 5 and s.stats.gets >= 3


def test_a_read_past_an_objects_end_is_damage_not_a_failed_request(object_store):
    """Objects are immutable and read at offsets their footers give: a range past the end
    means the object is shorter than written, which no retry mends."""
    s = object_store
    s.put_if_absent("d/short", b"0123456789")
    assert s.get_range("d/short", 5, 20) == b"56789"  # a range running past the end: cut
    for read in (lambda: s.get_range("d/short", 12, 20),
                 lambda: s.get_ranges("d/short", [2, 12], [4, 14])):
        with pytest.raises(lr.CorruptObjectError, match="truncated") as caught:
            read()
        assert caught.value.path == "d/short"
    assert s.stats.retries == 0


def test_async_forms_match(object_store):
    async def run():
        s = object_store
        assert await s.put_if_absent_async("e/a", b"abc")
        assert not await s.put_if_absent_async("e/a", b"zzz")
        assert await s.get_async("e/a") == b"abc"
        assert await s.get_range_async("e/a", 1, 3) == b"bc"
        assert [m.path for m in await s.list_async("e/")] == ["e/a"]
        await s.delete_async("e/a")
        assert await s.head_async("e/a") is None
    asyncio.run(run())


def test_store_pickles_as_its_configuration(tmp_path):
    import pickle

    s = ObjectStore.from_url(f"file://{tmp_path}/p")
    s.put_if_absent("x", b"1")
    clone = pickle.loads(pickle.dumps(s))
    assert clone.get("x") == b"1" and clone.url == s.url


def test_a_clones_routed_store_reads_ancestors_and_writes_only_its_own(tmp_path):
    parent = ObjectStore.from_url(f"file://{tmp_path}/parent")
    parent.put("ledger/a.sst", b"shared")
    routed = RoutedStore(ObjectStore.from_url(f"file://{tmp_path}/clone"),
                         (("p1", f"file://{tmp_path}/parent"),), lr.Options())
    assert routed.get("@p1/ledger/a.sst") == b"shared"
    assert routed.get_range("@p1/ledger/a.sst", 1, 3) == b"ha"
    with pytest.raises(lr.InvalidArgumentError):
        routed.put_if_absent("@p1/ledger/b.sst", b"x")  # an ancestor's files are read-only
    with pytest.raises(lr.InvalidArgumentError):
        routed.get("@unknown/ledger/a.sst")
    routed.delete("@p1/ledger/a.sst")  # the clone only stops referencing it
    assert parent.get("ledger/a.sst") == b"shared"
    assert routed.put_if_absent("ledger/own.sst", b"mine")
    assert [m.path for m in routed.list("ledger/")] == ["ledger/own.sst"]
    copy = pickle.loads(pickle.dumps(routed))
    assert copy.get("@p1/ledger/a.sst") == b"shared"
