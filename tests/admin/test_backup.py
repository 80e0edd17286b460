"""Hot backup and restore through real Ray actors, on file:// and s3:// (moto)."""

import pytest

import leveled_ray as lr
from leveled_ray.cli import main as cli

from conftest import SMALL, wait_until

pytestmark = pytest.mark.ray


def test_a_backup_restores_every_acknowledged_write(ray_cluster, durable_backend):
    url, options = durable_backend
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
        store.put("b", "last", b"after the backup")
        with pytest.raises(lr.InvalidArgumentError):
            store.backup(target, progress=False)  # not over an existing store
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
    assert "backed up" in capsys.readouterr().out
    assert lr.reader(f"file://{tmp_path}/copy").get("b", "k") == b"v"


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
