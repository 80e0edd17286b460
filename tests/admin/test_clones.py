"""Clones (forks) through real Ray actors on file:// and s3:// (moto): isolation both ways,
nested clones, retried creation, detaching, and a clone made while GC runs on its parent."""

import asyncio
import threading

import pytest
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.admin.clone import clone_manifest, create_clone
from leveled_ray.files.store import ObjectStore
from leveled_ray.files.sync import run_sync
from leveled_ray.manifest import Manifest, ManifestStore
from leveled_ray.read.store_reader import open_reader

pytestmark = pytest.mark.ray


def sibling(url: str, suffix: str) -> str:
    return url.rstrip("/") + "-" + suffix


def keys(n):
    return [("b", f"k{i:03d}") for i in range(n)]


def test_a_clone_and_its_parent_are_isolated_both_ways(ray_cluster, s3_backend):
    url, options = s3_backend
    child_url = sibling(url, "child")
    parent = lr.open(url, options)
    try:
        parent.put_many([lr.Put("b", k, b"parent %s" % k.encode()) for _, k in keys(50)])
        parent.put("b", "recent", b"acknowledged before the clone")
        parent.checkpoint()  # a clone starts from what the parent's manifest records
        child = lr.clone(url, child_url, options=options)
        try:
            assert child.get("b", "recent") == b"acknowledged before the clone"
            assert child.get_many(keys(50)) == [b"parent %s" % k.encode() for _, k in keys(50)]
            parent.put("b", "k001", b"parent later")
            child.put("b", "k002", b"child later")
            child.delete("b", "k003")
            assert child.get("b", "k001") == b"parent k001"
            assert parent.get("b", "k002") == b"parent k002"
            assert parent.get("b", "k003") == b"parent k003" and child.get("b", "k003") is None
            nested_url = sibling(url, "grandchild")
            child.checkpoint()
            nested = lr.clone(child_url, nested_url, options=options)
            try:
                assert nested.get_many([("b", "k001"), ("b", "k002"), ("b", "k003")]) == [
                    b"parent k001", b"child later", None]
                nested.put("b", "k004", b"nested")
                assert child.get("b", "k004") == b"parent k004"
                assert parent.get("b", "k004") == b"parent k004"
            finally:
                nested.close()
        finally:
            child.close()
    finally:
        parent.close()
    # After restarts the three stores still differ exactly as written.
    again = lr.open(child_url, options)
    try:
        assert again.get_many([("b", "k001"), ("b", "k002"), ("b", "k003")]) == [
            b"parent k001", b"child later", None]
    finally:
        again.close()
    assert open_reader(url, options).manifest.parent is None
    names = [c.name for c in lr.admin(url, options).list_checkpoints()]
    assert f"clone:{child_url}" in names


def test_bad_clones_are_refused(tmp_path):
    url = f"file://{tmp_path}/p"
    with pytest.raises(lr.InvalidArgumentError):  # no parent there
        run_sync(create_clone(url, f"file://{tmp_path}/c"))
    asyncio.run(ManifestStore(ObjectStore.from_url(url)).create_initial(Manifest.new()))
    for itself in (url, url + "/", f"file://{tmp_path}/./p", f"file://{tmp_path}//p"):
        # onto itself, however spelled
        with pytest.raises(lr.InvalidArgumentError, match="location of its own"):
            run_sync(create_clone(url, itself))
    other = f"file://{tmp_path}/other"
    asyncio.run(ManifestStore(ObjectStore.from_url(other)).create_initial(Manifest.new()))
    with pytest.raises(lr.InvalidArgumentError):  # over a store that is not its clone
        run_sync(create_clone(url, other))
    with pytest.raises(lr.CheckpointNotFoundError):  # as of a checkpoint that does not exist
        run_sync(create_clone(url, f"file://{tmp_path}/c", checkpoint="nope"))
    assert lr.admin(url).list_checkpoints() == []  # nothing was pinned by the failures


def test_an_interrupted_clone_is_finished_by_a_retry(ray_cluster, tmp_path):
    url, child_url = f"file://{tmp_path}/p", f"file://{tmp_path}/c"
    parent = lr.open(url)
    parent.put("b", "k", b"v")
    parent.close()

    async def interrupted():  # steps 1 and 2 of a clone, as if the process died before 3
        parents = ManifestStore(ObjectStore.from_url(url))
        pin = await lr.admin(url).create_checkpoint_async(name=f"clone:{child_url}")
        source = await parents.read(pin.manifest_id)
        mine = ManifestStore(ObjectStore.from_url(child_url))
        assert await mine.try_create(0, clone_manifest(source, url, pin.id))

    asyncio.run(interrupted())
    with pytest.raises(lr.InvalidArgumentError):
        lr.open(child_url)  # not initialized: it cannot be opened
    child = lr.clone(url, child_url)
    try:
        assert child.get("b", "k") == b"v"
    finally:
        child.close()
    pins = [c for c in lr.admin(url).list_checkpoints() if c.name == f"clone:{child_url}"]
    assert len(pins) == 1  # the retry reused the first pin
    assert lr.clone(url, child_url).get("b", "k") == b"v"  # and again: just opened


def test_a_clone_detaches_once_it_shares_nothing(ray_cluster, tmp_path):
    url, child_url = f"file://{tmp_path}/p", f"file://{tmp_path}/c"
    options = lr.Options(**SMALL, gc=dict(long_snapshot_timeout_s=1, interval_s=0))
    parent = lr.open(url, options)
    parent.put_many([lr.Put("b", k, b"old") for _, k in keys(300)])
    parent.close()
    child = lr.clone(url, child_url, options=options)
    try:
        for r in range(6):  # replace every shared value, so merges and compaction drop them
            child.put_many([lr.Put("b", k, b"new %d" % r) for _, k in keys(300)])
        for _ in range(3):
            child.compact_journal()
            wait_until(lambda: not child.stats()["inker"]["compacting"], timeout=60)

        def detached():
            child.compact_journal()
            return lr.gc(child_url, min_age=2, options=options).detached

        wait_until(detached, timeout=120, interval=1.0)
        assert open_reader(child_url, options).manifest.parent is None
        assert not [c for c in lr.admin(url, options).list_checkpoints()]  # the pin is gone
        assert child.get_many(keys(300)) == [b"new 5"] * 300
    finally:
        child.close()
    reopened = lr.open(child_url, options)
    try:
        assert reopened.get_many(keys(300)) == [b"new 5"] * 300
    finally:
        reopened.close()


def test_a_clone_made_while_gc_runs_on_its_parent(ray_cluster, tmp_url):
    url, options = tmp_url, lr.Options()
    options = options.replace(**SMALL, gc=dict(interval_s=0))
    parent = lr.open(url, options)
    try:
        for r in range(5):
            parent.put_many([lr.Put("b", k, b"round %d" % r) for _, k in keys(300)])
        stop = threading.Event()
        passes = []

        def collect():
            while not stop.is_set():
                passes.append(lr.gc(url, min_age=2, options=options))

        worker = threading.Thread(target=collect)
        worker.start()
        try:
            parent.checkpoint()
            child = lr.clone(url, sibling(url, "child"), options=options)
            for r in range(3):  # the parent moves on, and GC with it
                parent.put_many([lr.Put("b", k, b"later %d" % r) for _, k in keys(300)])
        finally:
            stop.set()
            worker.join()
        try:
            assert passes
            assert lr.gc(url, min_age=2, options=options).kept["referenced"] > 0
            assert child.get_many(keys(300)) == [b"round 4"] * 300
        finally:
            child.close()
    finally:
        parent.close()
