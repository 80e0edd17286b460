"""Durable checkpoints and readers through real Ray actors on file:// and s3:// (moto): what a
checkpoint holds, its admin calls with and without the store running, the files it keeps, and
a reader in a second process."""

import json
import subprocess
import sys
import time

import pytest
from support import REPO_ROOT
from support.stores import SMALL, current_files, stored
from support.waits import wait_until

import leveled_ray as lr

pytestmark = pytest.mark.ray


def test_a_checkpoint_holds_every_acknowledged_write(ray_cluster, s3_backend):
    url, options = s3_backend
    store = lr.open(url, options)
    try:
        store.put_many([lr.Put("b", f"k{i}", b"v%d" % i) for i in range(20)])
        store.put("b", "just-now", b"acknowledged a moment ago")  # not yet catalogued
        checkpoint = store.checkpoint(name="nightly")
        store.put("b", "just-now", b"after the checkpoint")
        with lr.reader(url, checkpoint.id, options=options) as r:
            assert r.get("b", "just-now") == b"acknowledged a moment ago"
            assert r.get_many([("b", f"k{i}") for i in range(20)]) == [b"v%d" % i
                                                                      for i in range(20)]
            figures = r.stats()  # a reader's figures, without Ray
            assert figures["checkpoint"] == checkpoint.id and figures["state"] == "open"
            assert figures["io"]["gets"] > 0 and figures["io"]["requests_by"]["list"]
        assert checkpoint.name == "nightly" and checkpoint.expires_at is None
        assert [c.id for c in store.list_checkpoints()] == [checkpoint.id]
    finally:
        store.close()


def test_checkpoint_admin_with_and_without_the_store(ray_cluster, s3_backend):
    url, options = s3_backend
    store = lr.open(url, options)
    try:
        store.put("b", "k", b"v1")
        a = store.checkpoint(lifetime=60)
        assert a.expires_at == pytest.approx(time.time() + 60, abs=5)
        b = store.checkpoint(source=a.id)
        assert b.manifest_id == a.manifest_id
        refreshed = store.refresh_checkpoint(a.id, 3600)
        assert refreshed.expires_at > a.expires_at
        with pytest.raises(lr.CheckpointNotFoundError):
            store.delete_checkpoint("no-such-checkpoint")
        with pytest.raises(lr.InvalidArgumentError):
            store.checkpoint(lifetime=-5)
    finally:
        store.close()
    # No store running: the same calls on the URL; checkpoints survived the close.
    admin = lr.admin(url, options)
    assert {c.id for c in admin.list_checkpoints()} == {a.id, b.id}
    c = admin.create_checkpoint(name="offline")
    admin.delete_checkpoint(b.id)
    admin.refresh_checkpoint(c.id, None)
    assert {x.id for x in admin.list_checkpoints()} == {a.id, c.id}
    reopened = lr.open(url, options)  # a restarted store keeps them, and they still read
    try:
        assert {x.id for x in reopened.list_checkpoints()} == {a.id, c.id}
        reopened.put("b", "k", b"v2")
    finally:
        reopened.close()
    follower = lr.reader(url, a.id, options=options)
    assert follower.get("b", "k") == b"v1"
    with pytest.raises(lr.InvalidArgumentError):
        follower.refresh()  # it follows a given checkpoint: it cannot move
    follower.close()
    with pytest.raises(lr.SnapshotExpiredError):
        follower.get("b", "k")
    with pytest.raises(lr.CheckpointNotFoundError):
        lr.reader(url, "no-such-checkpoint", options=options).get("b", "k")
    with pytest.raises(lr.InvalidArgumentError):
        lr.admin(url.rstrip("/") + "-nothing-here", options).list_checkpoints()


def test_a_checkpoint_keeps_its_files_until_deleted(ray_cluster, tmp_url):
    url, options = tmp_url, lr.Options(**SMALL)
    store = lr.open(url, options)
    try:
        store.put_many([lr.Put("b", f"k{i:04d}", b"first") for i in range(300)])
        wait_until(lambda: store.stats()["penciller"]["ledger_sqn"] > 0, timeout=30)
        checkpoint = store.checkpoint()
        pinned = lr.reader(url, checkpoint.id, options=options)
        held = current_files(url, options)
        for r in range(6):
            store.put_many([lr.Put("b", f"k{i:04d}", b"round %d" % r) for i in range(300)])
        store.compact_journal()
        wait_until(lambda: held - current_files(url, options), timeout=60)
        swept = store.stats()["reaper_sweeps"] + 2  # the reaper has had its chances:
        wait_until(lambda: store.stats()["reaper_sweeps"] >= swept, timeout=30)
        replaced = held - current_files(url, options)
        assert replaced <= stored(url, options)
        assert pinned.get_many([("b", f"k{i:04d}") for i in range(300)]) == [b"first"] * 300
        store.delete_checkpoint(checkpoint.id)
        wait_until(lambda: not (replaced & stored(url, options)), timeout=60, interval=0.5)
    finally:
        store.close()


READER_SCRIPT = """
import json, sys
import leveled_ray as lr
url, checkpoint = sys.argv[1], sys.argv[2]
with lr.reader(url, checkpoint) as r:
    print(json.dumps([None if v is None else v.decode() for v in
                      r.get_many([("b", "k1"), ("b", "k2"), ("b", "later")])]))
with lr.reader(url) as own:  # a reader that pins its own checkpoint
    print(json.dumps(own.get("b", "later").decode()))
"""


def test_a_reader_in_a_second_process(ray_cluster, tmp_url):
    store = lr.open(tmp_url)
    try:
        store.put_many([lr.Put("b", "k1", b"one"), lr.Put("b", "k2", b"two")])
        checkpoint = store.checkpoint()
        store.put("b", "later", b"later")
        store.checkpoint()  # records the later write in the manifest too
        out = subprocess.run([sys.executable, "-c", READER_SCRIPT, tmp_url, checkpoint.id],
                             capture_output=True, text=True, timeout=120,
                             cwd=REPO_ROOT.parent)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.strip().splitlines()
        assert json.loads(lines[0]) == ["one", "two", None]
        assert json.loads(lines[1]) == "later"
        # The second reader deleted its own checkpoint when it closed.
        assert len(store.list_checkpoints()) == 2
    finally:
        store.close()
