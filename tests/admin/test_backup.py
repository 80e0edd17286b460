"""Hot backup and restore through real Ray actors, on file:// and s3:// (moto)."""

import contextlib
import shutil
import signal
import subprocess
import sys

import pytest
from support import REPO_ROOT
from support.stores import SMALL
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.admin.backup import backup_manifest, check_target
from leveled_ray.cli import main as cli
from leveled_ray.manifest.model import Manifest
from leveled_ray.manifest.store import Versioned

pytestmark = pytest.mark.ray


def test_a_backup_restores_every_acknowledged_write(ray_cluster, s3_backend):
    url, options = s3_backend
    options = options.replace(**SMALL)
    store = lr.open(url, options)
    target = url.rstrip("/") + "-backup"
    try:
        for r in range(4):
            store.put_many([lr.Put("b", f"k{i:03d}", b"round %d" % r) for i in range(200)])
        store.delete("b", "k007")
        store.compact_journal()
        wait_until(lambda: not store.stats()["inker"]["compacting"], timeout=60)
        store.put("b", "last", b"acknowledged just before the backup")
        done = store.backup(target, progress=False)
        assert done["files"] > 0 and done["max_sqn"] >= store.stats()["durable_sqn"]
        assert done["copied"] == done["files"] and done["version"] == 0
        store.put("b", "last", b"after the backup")
        with pytest.raises(lr.InvalidArgumentError):
            store.backup(url, progress=False)  # not over a store that is not its backup
        assert store.list_checkpoints() == []  # the backup's pin is gone
    finally:
        store.close()
    restored = lr.open(target, options)
    try:
        keys = [("b", f"k{i:03d}") for i in range(200)]
        expected = [None if i == 7 else b"round 3" for i in range(200)]
        assert restored.get_many(keys) == expected
        assert restored.get("b", "last") == b"acknowledged just before the backup"
        assert restored.open_info["replayed"] > 0  # the Ledger was rebuilt from the Journal
    finally:
        restored.close()


def test_backup_command(ray_cluster, tmp_path, capsys):
    url = f"file://{tmp_path}/db"
    store = lr.open(url)
    store.put("b", "k", b"v")
    store.close()
    assert cli.main(["backup", "--url", url, f"file://{tmp_path}/copy"]) == 0
    assert "backed up 1 journal file(s) (1 copied" in capsys.readouterr().out
    assert lr.reader(f"file://{tmp_path}/copy").get("b", "k") == b"v"
    assert cli.main(["backup", "--url", url, f"file://{tmp_path}/copy"]) == 0  # nothing new
    assert "(0 copied" in capsys.readouterr().out


def test_a_clone_backs_up_with_its_shared_files(ray_cluster, tmp_path):
    url, child, copy = (f"file://{tmp_path}/{n}" for n in ("p", "c", "copy"))
    parent = lr.open(url)
    parent.put_many([lr.Put("b", f"k{i}", b"parent") for i in range(20)])
    parent.close()
    clone = lr.clone(url, child)
    try:
        clone.put("b", "k1", b"clone")
        clone.backup(copy, progress=False)
    finally:
        clone.close()
    restored = lr.open(copy)
    try:
        assert restored.get_many([("b", "k0"), ("b", "k1")]) == [b"parent", b"clone"]
    finally:
        restored.close()


KILLED_BACKUP = """
import os, signal, sys
import leveled_ray as lr
from leveled_ray.admin.backup import backup_manifest, check_target
from leveled_ray.manifest.model import Manifest
from leveled_ray.manifest.store import Versioned

def progress(done, total):
    if done == 2:  # mid-way: some of this round's files are copied, the manifest is not
        os.kill(os.getpid(), signal.SIGKILL)

lr.admin(sys.argv[1]).backup(sys.argv[2], progress=progress)
"""


def test_incremental_backups_restore_every_round_and_survive_a_kill(ray_cluster, tmp_path):
    url, target = f"file://{tmp_path}/db", f"file://{tmp_path}/backup"
    store = lr.open(url, lr.Options(**SMALL))
    expected: dict = {}
    rounds = []

    def write_round(r: int) -> None:
        for g in range(4):  # four journal files: a backup has several to copy
            puts = [lr.Put("b", f"k{i:03d}", b"r%d g%d" % (r, g)) for i in range(g, 120, 4)]
            store.put_many(puts)
            expected.update({p.key: p.value for p in puts})
        store.delete("b", f"k{r:03d}")
        expected[f"k{r:03d}"] = None

    def restored(where: str, copy_to: str, open_it: bool = True) -> dict:
        """What a restore from a copy of the backup holds (the backup itself stays one): by
        opening it, or (cheaper) with a reader, which replays the same Journal."""
        shutil.copytree(where, copy_to)
        keys = [("b", k) for k in expected]
        if not open_it:
            with lr.reader(f"file://{copy_to}") as back:
                return dict(zip(expected, back.get_many(keys)))
        with contextlib.closing(lr.open(f"file://{copy_to}")) as back:
            assert back.open_info["replayed"] > 0  # the Ledger was rebuilt from the Journal
            return dict(zip(expected, back.get_many(keys)))

    try:
        for r in range(3):
            write_round(r)
            if r == 1:  # journal compaction drops files the next backup must drop too
                store.compact_journal()
                wait_until(lambda: store.stats()["inker"]["compactions"] >= 1, timeout=60)
            done = store.backup(target, progress=False)
            rounds.append(done)
            assert restored(f"{tmp_path}/backup", f"{tmp_path}/restore{r}", r == 0) == expected
        assert [d["version"] for d in rounds] == [0, 1, 2]
        assert 4 <= rounds[2]["copied"] < rounds[2]["files"]  # only what it lacked
        assert rounds[1]["removed"] >= 2  # what compaction dropped, and the older manifest
        before_kill = dict(expected)
        write_round(3)
        killed = subprocess.run([sys.executable, "-c", KILLED_BACKUP, url, target],
                                cwd=REPO_ROOT.parent, capture_output=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        # The previous round's backup is whole: a restore gives exactly it.
        partial = restored(f"{tmp_path}/backup", f"{tmp_path}/after-kill")
        assert partial == before_kill != expected
        done = store.backup(target, progress=False)  # carries on from what it had copied
        assert done["version"] == 3 and done["copied"] < 4
        assert restored(f"{tmp_path}/backup", f"{tmp_path}/last") == expected
    finally:
        store.close()


def test_a_backup_goes_only_to_an_empty_place_or_over_this_stores_own_backup():
    source = Manifest.new()
    check_target(None, source, "file:///empty")  # an empty location
    ours = Versioned(3, backup_manifest(source, None, []))
    check_target(ours, source, "file:///ours")  # this store's own earlier backup
    with pytest.raises(lr.InvalidArgumentError, match="not a backup of this one"):
        check_target(ours, Manifest.new(), "file:///ours")  # another store's backup
    with pytest.raises(lr.InvalidArgumentError, match="not a backup of this one"):
        check_target(Versioned(0, Manifest.new()), source, "file:///store")  # a plain store
    restored = Versioned(4, ours.manifest.with_changes(writer_epoch=1))
    with pytest.raises(lr.InvalidArgumentError, match="opened"):
        check_target(restored, source, "file:///restored")  # opened since: a store now
