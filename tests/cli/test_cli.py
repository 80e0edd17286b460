"""The leveled-ray command line and the in-process reader."""

import json
import uuid

import pytest

import leveled_ray as lr
from leveled_ray.cli import main as cli
from leveled_ray.read.store_reader import open_reader

pytestmark = pytest.mark.ray


@pytest.fixture
def loaded(ray_cluster, tmp_url):
    store = lr.open(tmp_url, lr.Options(ledger=dict(l0_max_keys=100, push_keys=20, push_ms=5)))
    store.put_many([lr.Put("b", f"k{i}", b"value %d" % i) for i in range(300)])
    store.put("b", b"\x00raw", b"bytes key")
    store.put("b", "unflushed", b"only in the journal")
    yield tmp_url, store
    store.close()


def test_reader_sees_everything_without_fencing_the_writer(loaded):
    url, store = loaded
    reader = open_reader(url)
    import asyncio

    from leveled_ray.codec import object_key
    assert asyncio.run(reader.get(object_key("b", "k5"))) == b"value 5"
    assert asyncio.run(reader.get(object_key("b", "unflushed"))) == b"only in the journal"
    assert asyncio.run(reader.head(object_key("b", "nope"))) is None
    store.put("b", "still", b"writable")  # the writer was not fenced
    assert store.get("b", "still") == b"writable"


def test_get_head_put_delete_inspect(loaded, capsysbinary):
    capsys = capsysbinary
    url, store = loaded
    assert cli.main(["get", "--url", url, "b", "k7"]) == 0
    assert capsys.readouterr().out == b"value 7"
    assert cli.main(["get", "--url", url, "b", "hex:00726177"]) == 0
    assert capsys.readouterr().out == b"bytes key"
    assert cli.main(["head", "--url", url, "b", "k7"]) == 0
    assert json.loads(capsys.readouterr().out)["size"] == 7
    assert cli.main(["get", "--url", url, "b", "missing"]) == 1
    capsys.readouterr()
    store.close()
    assert cli.main(["put", "--url", url, "b", "new", "hello"]) == 0
    assert int(capsys.readouterr().out) > 300
    assert cli.main(["delete", "--url", url, "b", "k7"]) == 0
    capsys.readouterr()
    assert cli.main(["get", "--url", url, "b", "k7"]) == 1
    assert cli.main(["inspect", "--url", url, "--json", "--files", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["problems"] == []
    assert sum(lv["files"] for lv in info["levels"]) >= 1 and info["journal"]["files"] >= 3
    assert sum(lv["entries"] for lv in info["levels"]) >= 300
    assert info["writer_epoch"] == 3 and info["max_sqn"] >= 304
    assert any(f["name"].startswith("ledger/") for f in info["ssts"])
    assert cli.main(["inspect", "--url", url]) == 0
    assert b"writer epoch 3" in capsys.readouterr().out


def test_inspect_verify_reports_corruption(loaded, tmp_path, capsys):
    url, store = loaded
    store.close()
    sst = next((tmp_path / "db" / "ledger").glob("*.sst"))
    raw = bytearray(sst.read_bytes())
    raw[10] ^= 0x55
    sst.write_bytes(bytes(raw))
    assert cli.main(["inspect", "--url", url, "--verify"]) == 1
    assert "checksum mismatch" in capsys.readouterr().out


def test_errors_are_reported_cleanly(tmp_path, capsys):
    assert cli.main(["inspect", "--url", f"file://{tmp_path}/nothing"]) == 2
    assert "no store at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["inspect", "--url", f"file://{tmp_path}/x", "--option", "colour=blue"])


def test_checkpoint_gc_and_destroy_commands(loaded, capsys):
    url, store = loaded
    assert cli.main(["checkpoint", "create", "--url", url, "--name", "ops", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)[0]
    assert created["name"] == "ops" and created["expires_at"] is None
    assert cli.main(["checkpoint", "refresh", created["id"], "--url", url,
                     "--lifetime", "600", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["expires_at"] is not None
    assert cli.main(["inspect", "--url", url, "--checkpoints", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["checkpoint_list"]
    assert [c["id"] for c in listed] == [created["id"]]
    assert cli.main(["checkpoint", "delete", "--url", url]) == 2  # no id given
    assert cli.main(["checkpoint", "delete", "no-such", "--url", url]) == 2
    assert "CheckpointNotFoundError" in capsys.readouterr().err
    assert cli.main(["checkpoint", "delete", created["id"], "--url", url]) == 0
    capsys.readouterr()
    assert cli.main(["gc", "--url", url, "--dry-run", "--min-age", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kept"]["referenced"] > 0
    assert store.get("b", "k1") == b"value 1"  # a GC pass leaves the store whole
    assert cli.main(["clone", "--url", url, url + "-clone"]) == 0
    assert "cloned" in capsys.readouterr().out
    with lr.reader(url + "-clone") as r:
        assert r.get("b", "k1") == b"value 1"
    store.close()
    assert cli.main(["destroy", "--url", url, "--now"]) == 2  # the clone's pin is live
    assert "checkpoints" in capsys.readouterr().err
    lr.destroy(url + "-clone", soft=False)
    pin = lr.admin(url).list_checkpoints()[0]
    lr.admin(url).delete_checkpoint(pin.id)
    assert cli.main(["destroy", "--url", url, "--now"]) == 0
    assert "destroyed" in capsys.readouterr().out
    assert cli.main(["inspect", "--url", url]) == 2  # nothing left


def test_keys_buckets_and_index_queries(ray_cluster, tmp_url, capsys):
    with lr.open(tmp_url, lr.Options(ledger=dict(l0_max_keys=100, push_keys=20,
                                                 push_ms=5))) as store:
        store.put_many([lr.Put("b", f"k{i:03d}", b"v", indexes=[("add", "n_int", i % 7)])
                        for i in range(250)])
        store.put("c", b"\x00raw", b"v", indexes=[("add", "t_bin", "x")])
        store.delete("b", "k000")
    assert cli.main(["keys", "--url", tmp_url, "--bucket", "b", "--start", "k010",
                     "--end", "k012"]) == 0
    assert capsys.readouterr().out.splitlines() == ["b\tk010", "b\tk011", "b\tk012"]
    assert cli.main(["keys", "--url", tmp_url, "--limit", "3", "--json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        ["b", "k001"], ["b", "k002"], ["b", "k003"]]
    assert cli.main(["buckets", "--url", tmp_url]) == 0
    assert capsys.readouterr().out.split() == ["b", "c"]
    assert cli.main(["index", "--url", tmp_url, "b", "n_int", "3", "--terms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len([i for i in range(250) if i % 7 == 3]) and lines[0] == "3\tk003"
    assert cli.main(["index", "--url", tmp_url, "c", "t_bin", "a", "z"]) == 0
    assert capsys.readouterr().out.split() == ["hex:0072617" + "7"]
    assert cli.main(["index", "--url", tmp_url, "b", "n_int", "x"]) == 2
    assert "takes int terms" in capsys.readouterr().err


def test_stats_of_a_running_store_and_of_its_manifest(ray_cluster, tmp_url, capsys):
    name = f"stats-{uuid.uuid4().hex[:8]}"
    store = lr.open(tmp_url, lr.Options(ledger=dict(l0_max_keys=100, push_keys=20, push_ms=5)),
                    name=name)
    try:
        store.put_many([lr.Put("b", f"k{i:03d}", b"v" * 50) for i in range(200)])
        assert len(store.get_many([("b", f"k{i:03d}") for i in range(50)])) == 50
        assert cli.main(["stats", "--name", name, "--json", "--watch", "0.3",
                         "--count", "2"]) == 0
        first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
        assert first["rates"]["puts/s"] is None and second["rates"]["puts/s"] == 0.0
        assert second["durable_sqn"] == 200 and second["state"] == "open"
        assert second["latency_ms"]["put"]["p50"] > 0 and second["latency_ms"]["get"]
        assert second["object_store"]["requests"] > 0 and second["object_store"]["errors"] == 0
        assert second["levels"] and second["live_snapshots"] == 0
        assert cli.main(["stats", "--name", name, "--watch", "0.2", "--count", "2"]) == 0
        shown = capsys.readouterr().out  # the terminal view (rich), as the terminal gets it
        assert "leveled-ray stats" in shown and "puts/s" in shown and "L0" in shown
    finally:
        store.close()
    assert cli.main(["stats", "--url", tmp_url, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["source"].startswith("manifest") and figures["max_sqn"] == 200
    for bad in ("0", "nan", "inf"):
        with pytest.raises(SystemExit):
            cli.main(["stats", "--url", tmp_url, "--watch", bad])
