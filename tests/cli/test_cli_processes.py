"""The command line as an operator runs it: every verb as a process of its own, on file:// and
on moto's S3, plain and sharded, checked by its output and exit status; bad input is a clear
message on stderr and exit status 2, with nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from support.s3 import S3_BUCKET, S3_KEY, S3_REGION

pytestmark = pytest.mark.ray

CLI = [sys.executable, "-m", "leveled_ray.cli.main"]


class Operator:
    """Runs verbs against one store as ``leveled-ray VERB --url URL [options] ...``."""

    def __init__(self, url: str, options: list[str], env: dict):
        self.url, self.options, self.env = url, options, env

    def run(self, *words: str, url: str | None = None, expect: int = 0) -> str:
        verb, *rest = words
        done = subprocess.run([*CLI, verb, "--url", url or self.url, *self.options, *rest],
                              capture_output=True, text=True, env=self.env, timeout=180)
        assert done.returncode == expect, (words, done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (words, done.stderr[-2000:])
        return done.stdout if expect != 2 else done.stderr

    def other(self, name: str) -> str:
        return f"{self.url.rsplit('/', 1)[0]}/{name}"


# On S3 the verbs run in make examples (about a minute), to keep make test within its time.
@pytest.fixture(params=["file", pytest.param("s3", marks=[pytest.mark.s3, pytest.mark.example])])
def backend(request, ray_cluster, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    if request.param == "file":
        return f"file://{tmp_path}/stores/db", [], env
    endpoint = request.getfixturevalue("moto_endpoint")
    options = [f"object_store.{k}={v}" for k, v in (
        ("s3_endpoint", endpoint), ("s3_region", S3_REGION), ("s3_access_key_id", S3_KEY),
        ("s3_secret_access_key", S3_KEY))]
    return (f"s3://{S3_BUCKET}/cli-{uuid.uuid4().hex[:8]}/db",
            [w for o in options for w in ("--option", o)], env)


# Each verb is a process of its own (20 s a layout): they run in make examples (CI runs it);
# make test runs the verbs in-process (test_cli.py) and bad input as processes (below).
@pytest.mark.example
@pytest.mark.parametrize("shards", [None, 2], ids=["plain", "sharded"])
def test_every_verb_as_a_process(backend, shards, tmp_path):
    url, options, env = backend
    op = Operator(url, options, env)
    demo = op.run("demo", "--objects", "300", "--value-bytes", "64",
                  *(["--shards", str(shards)] if shards else []))
    assert "all correct" in demo and "300" in demo
    assert int(op.run("put", "b", "k", "hello")) > 0  # its SQN
    assert op.run("get", "b", "k") == "hello"
    assert json.loads(op.run("head", "b", "k"))["size"] == 5
    op.run("get", "b", "missing", expect=1)
    assert len(op.run("keys", "--bucket", "demo", "--limit", "5").splitlines()) == 5
    assert set(op.run("buckets").split()) >= {"b", "demo", "demo-single"}
    assert op.run("index", "b", "city_bin", "paris") == ""
    op.run("inspect")
    made = json.loads(op.run("checkpoint", "create", "--lifetime", "600", "--json"))[0]
    listed = json.loads(op.run("checkpoint", "list", "--json"))
    assert made["id"] in {row["id"] for row in listed}
    op.run("checkpoint", "refresh", made["id"], "--lifetime", "900")
    op.run("checkpoint", "delete", made["id"])
    assert made["id"] not in op.run("checkpoint", "list")
    swept = json.loads(op.run("gc", "--dry-run", "--json"))
    assert swept["failed"] == [] and swept["kept"]["referenced"] > 0
    assert json.loads(op.run("stats", "--json"))["store"].rstrip("/") == url
    backup = op.other("backup")
    op.run("backup", backup)
    assert "0 difference(s)" in op.run("compare", backup)
    clone = op.other("clone")
    op.run("clone", clone)
    assert op.run("get", "b", "k", url=clone) == "hello"
    out = tmp_path / "export"
    assert "exported 501 row(s)" in op.run("export", "--to", str(out))
    assert int(op.run("delete", "b", "k")) > 0
    op.run("get", "b", "k", expect=1)
    assert "1 difference(s)" in op.run("compare", backup, expect=1)
    assert "destroyed" in op.run("destroy", "--now", url=clone)


def test_bad_input_is_a_message_and_exit_status_2_with_nothing_changed(ray_cluster, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    missing = f"file://{tmp_path}/missing"
    op = Operator(missing, [], env)
    for words, message in (
            (("get", "b", "k"), "no store at"),
            (("keys",), "no store at"),
            (("stats",), "no store at"),
            (("inspect",), "no store at"),
            (("checkpoint", "create"), "no store at"),
            (("checkpoint", "delete"), "needs the checkpoint's id"),
            (("compare", "nope://x"), "no store at"),
            (("backup", f"file://{tmp_path}/b"), "no store at"),
            (("export", "--to", str(tmp_path / "out")), "no store at"),
            (("demo", "--objects", "0"), "--objects"),
            (("get", "b", "k", "--option", "journal.max_file_bytes=nan"), "max_file_bytes")):
        assert message in op.run(*words, expect=2), words
    assert list(tmp_path.iterdir()) == []  # nothing made, not even a directory
