"""Shared fixtures: one local Ray cluster and one moto S3 server per test session."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

import leveled_ray as lr
from leveled_ray.files.store import ObjectStore
from leveled_ray.read.store_reader import open_reader

REPO_ROOT = Path(__file__).resolve().parent.parent


class _RepoRootIsNotATestPackage:
    """The repository root is the ``leveled_ray`` package itself. Left alone, pytest would
    collect it as a test package and import its ``__init__.py`` under the checkout's directory
    name (which fails for names like ``ci-check``); a plain directory node avoids that."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path, parent):
        if Path(path).resolve() == REPO_ROOT:
            return pytest.Dir.from_parent(parent, path=path)
        return None


#: The session's Ray auth settings (see :func:`_token_auth_on`), undone at its end.
_auth_env = pytest.MonkeyPatch()
_AUTH_FOLDER = pytest.StashKey[str]()


def _token_auth_on() -> str:
    """Token auth on for every Ray cluster the session starts or joins, with a token of its
    own: left to Ray, a cluster started by ``ray start`` or ``cluster_utils`` uses token auth
    only if this machine happens to hold ``~/.ray/auth_token``, so the session's security
    mode (and the Ray Client tests) would depend on the machine. Processes the tests start
    inherit it. Returns the token's folder."""
    folder = tempfile.mkdtemp(prefix="lr-auth-")
    path = os.path.join(folder, "auth_token")
    with open(path, "w") as f:
        f.write(secrets.token_hex(32))
    _auth_env.delenv("RAY_AUTH_TOKEN", raising=False)
    _auth_env.setenv("RAY_AUTH_MODE", "token")
    _auth_env.setenv("RAY_AUTH_TOKEN_PATH", path)
    return folder


def pytest_configure(config):
    config.pluginmanager.register(_RepoRootIsNotATestPackage(), "leveled-ray-repo-root")
    config.stash[_AUTH_FOLDER] = _token_auth_on()


def pytest_unconfigure(config):
    shutil.rmtree(config.stash[_AUTH_FOLDER], ignore_errors=True)
    _auth_env.undo()


S3_KEY = "testing"
S3_REGION = "us-east-1"
S3_BUCKET = "leveled-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's S3 server on 127.0.0.1, with one bucket; the endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=S3_KEY,
                 aws_secret_access_key=S3_KEY, region_name=S3_REGION).create_bucket(
        Bucket=S3_BUCKET)
    yield endpoint
    server.stop()


def s3_options(endpoint: str, **changes) -> lr.Options:
    """Options for moto's S3 server at ``endpoint``, with ``changes`` (groups as dicts)."""
    return lr.Options().replace(**changes).replace(object_store=dict(
        s3_endpoint=endpoint, s3_region=S3_REGION, s3_access_key_id=S3_KEY,
        s3_secret_access_key=S3_KEY))


#: The session's Ray nodes: a head and two workers, 1 CPU each, each with its own resource.
NODES = ("node0", "node1", "node2")


@pytest.fixture(scope="session")
def ray_cluster():
    """A local multi-node Ray cluster shared by the whole session (starting one takes
    seconds): a head and two worker nodes, as Ray's own tests build them."""
    import ray
    from ray.cluster_utils import Cluster

    tmp = tempfile.mkdtemp(prefix="lr-ray-")
    os.environ["RAY_TMPDIR"] = tmp
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {NODES[0]: 1}, "include_dashboard": False,
        "object_store_memory": 1 << 30,
        "_system_config": {"metrics_report_interval_ms": 1000}})  # metrics tests wait less
    for node in NODES[1:]:
        cluster.add_node(num_cpus=1, resources={node: 1},
                         object_store_memory=300 << 20)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="leveled", log_to_driver=False,
             logging_level="WARNING")
    yield ray
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)  # the session's Ray logs and sockets


@pytest.fixture
def tmp_url(tmp_path):
    return f"file://{tmp_path}/db"


@pytest.fixture(params=["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request, tmp_path):
    """``(url, options)`` for a fresh store on each object store kind."""
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def durable_backend(request, tmp_path):
    """``(url, options)`` for a fresh store on file:// and on s3:// (moto)."""
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.s3)])
def s3_backend(request, tmp_path):
    """``(url, options)`` for a fresh store on s3:// (moto): for tests whose file:// twin
    would add time but no coverage (the local store's protocol paths are what most other
    tests run on)."""
    yield from _backend(request.param, request, tmp_path)


def _backend(kind, request, tmp_path):
    if kind == "memory":
        name = f"t-{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}", lr.Options()
        from leveled_ray.files.backends import drop_memory_store

        drop_memory_store(name)  # its actor would otherwise live until Ray shuts down
        return
    if kind == "file":
        yield f"file://{tmp_path}/db", lr.Options()
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    yield f"s3://{S3_BUCKET}/t-{uuid.uuid4().hex[:12]}", s3_options(endpoint)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def run_until_ready_then_kill(script: str, *args: str) -> None:
    """Run ``script`` in a new Python process until it prints ``READY``, then kill it with
    SIGKILL (no cleanup of any kind): a client or driver that dies at a chosen point."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                               text=True, cwd=REPO_ROOT.parent)
    try:
        assert process.stdout.readline().strip() == "READY"
    finally:
        process.kill()
        process.wait()


def kill_actor(handle) -> None:
    """Kill an actor (no cleanup, no restart) and wait until calls to it fail: a kill takes
    effect a little later, and a call sent meanwhile may still be answered."""
    import ray

    ray.kill(handle, no_restart=True)

    def dead() -> bool:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return True
        return False

    wait_until(dead, timeout=30)


def persisted(store, sqn: int) -> bool:
    """Whether every change up to ``sqn`` is in the Ledger's SSTs."""
    return store.stats()["penciller"]["ledger_sqn"] >= sqn


#: Small Ledger settings, so a test reaches merges and journal compaction quickly.
SMALL = dict(ledger=dict(l0_max_keys=200, push_keys=50, push_ms=5, sst_max_keys=150),
             journal=dict(compaction_interval_s=0))


def current_files(url, options) -> set[str]:
    """The Ledger and journal files the newest manifest lists."""
    m = open_reader(url, options).manifest
    return {f.name for level in m.levels for f in level} | {j.name for j in m.journal}


def stored(url, options) -> set[str]:
    """The Ledger and journal objects in the object store."""
    objects = ObjectStore.from_url(url, options)
    return {m.path for prefix in ("ledger/", "journal/") for m in objects.list(prefix)}
