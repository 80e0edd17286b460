"""Shared fixtures: one local Ray cluster and one moto S3 server per test session."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.s3 import S3_BUCKET, S3_KEY, S3_REGION, free_port, s3_options

import leveled_ray as lr


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
    # A shell that starts a command in the background (``make test &``) starts it with Ctrl-C
    # ignored: tests/read/test_fold_steps.py would then see no Ctrl-C at all. The session
    # takes Python's own handler back, as a process started in the foreground has.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.pluginmanager.register(_RepoRootIsNotATestPackage(), "leveled-ray-repo-root")
    config.stash[_AUTH_FOLDER] = _token_auth_on()


def pytest_unconfigure(config):
    shutil.rmtree(config.stash[_AUTH_FOLDER], ignore_errors=True)
    _auth_env.undo()


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
        "object_store_memory": 1 << 30, "_system_config": {
            "metrics_report_interval_ms": 1000,  # metrics tests wait less
            # A killed node is found dead in about 1.5 s, not 15 s (failover tests): a node
            # that answers slowly is not, as only failed checks count.
            "health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    for node in NODES[1:]:
        cluster.add_node(num_cpus=1, resources={node: 1},
                         object_store_memory=300 << 20)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="leveled", log_to_driver=False,
             logging_level="WARNING")
    # Plain opens take a Bookie process started ahead (client/spares.py): most of an open's
    # time is that process starting, and the session opens hundreds of stores.
    lr.keep_spare_bookies(2)
    _cluster.append(cluster)
    yield ray
    _cluster.clear()
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)  # the session's Ray logs and sockets


_cluster: list = []  # the session's Cluster, while it runs


@pytest.fixture
def spare_node(ray_cluster):
    """A fourth node, added to the session's cluster for one test (which may kill it:
    ``node.kill()``), with the resource ``"spare"``; removed at the test's end."""
    (cluster,) = _cluster
    node = cluster.add_node(num_cpus=1, resources={"spare": 1}, object_store_memory=200 << 20)
    cluster.wait_for_nodes()
    node.kill = lambda: cluster.remove_node(node, allow_graceful=False)
    yield node
    if node in cluster.worker_nodes:
        cluster.remove_node(node)


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
