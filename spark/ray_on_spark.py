"""Ray-on-Spark: a Ray cluster started on a Spark cluster's workers, with the store's actors on
it (:func:`start_ray_on_spark`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

from ..client.ray_connection import ensure_ray, join_with_token, ray_token
from ..entry_points import connect
from ..entry_points import open as open_store
from ..errors import InvalidArgumentError
from ..options import Options


class NodeEnvHook:
    """Ray-on-Spark start hook (set as ``RAY_ON_SPARK_START_HOOK`` by
    :func:`start_ray_on_spark`): the Ray worker nodes that Spark tasks start find this
    interpreter's ``ray`` command, and join with the head's token."""

    def __init__(self, is_global: bool = False):
        self.is_global = is_global

    def get_default_temp_root_dir(self) -> str:
        return os.environ.get("RAY_TMPDIR", "/tmp")

    def on_ray_dashboard_created(self, port) -> None:
        pass

    def on_cluster_created(self, ray_cluster_handler) -> None:
        pass

    def on_spark_job_created(self, job_group_id) -> None:
        pass

    def custom_environment_variables(self) -> dict:
        env = {"PATH": with_bin_dir(os.environ.get("PATH", ""))}
        token = ray_token()
        if token is not None:
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        return env


def with_bin_dir(path: str) -> str:
    """``path`` with this interpreter's scripts directory (where ``ray`` is) first."""
    bin_dir = os.path.dirname(sys.executable)
    parts = path.split(os.pathsep) if path else []
    return os.pathsep.join([bin_dir] + [p for p in parts if p != bin_dir])


@dataclass
class RayOnSpark:
    """A Ray cluster running on Spark with a store's actors on it, from
    :func:`start_ray_on_spark`. Picklable: a Spark task calls :meth:`connect` to reach the
    store (``mapInArrow`` with ``put_many`` / ``get_many``)."""

    address: str
    url: str
    store_name: str
    options: Options
    _token: str | None = field(default=None, repr=False)
    #: The Store this handle opened (it keeps the actors alive); not sent to tasks.
    _store: object = field(default=None, repr=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_store": None}

    def connect(self):
        """The store (an :class:`~leveled_ray.client.store.Store`), joining the Ray cluster from
        this
        process if needed (in a Spark task, or the driver)."""
        import ray

        if not ray.is_initialized():
            if self._token and ray_token() is None:
                os.environ["RAY_AUTH_TOKEN"] = self._token  # ensure_ray joins with it
            ensure_ray(self.address)
        return connect(self.store_name)

    def write_options(self) -> dict:
        """Options for ``df.write.format("leveled")`` that install through this store's
        running Bookie."""
        return {"url": self.url, "store_name": self.store_name, "ray_address": self.address}

    def shutdown(self) -> None:
        """Close the store (if this handle opened it), leave Ray and stop the cluster."""
        import ray
        from ray.util.spark import shutdown_ray_cluster

        try:
            if self._store is not None:
                self._store.close()
                self._store = None
        finally:
            if ray.is_initialized():
                ray.shutdown()
            shutdown_ray_cluster()
            os.environ.pop("RAY_ADDRESS", None)

    def __enter__(self) -> RayOnSpark:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def start_ray_on_spark(spark, url: str, *, store_name: str = "leveled",
                       options: Options | None = None, max_worker_nodes: int = 1,
                       num_cpus_worker_node: int | None = None,
                       head_node_options: dict | None = None, **setup_options) -> RayOnSpark:
    """Start Ray on the Spark cluster (``ray.util.spark.setup_ray_cluster``), join it, and open
    the store at ``url`` there under ``store_name`` (or connect to it, if a store of that name
    already runs). Returns a :class:`RayOnSpark`; call ``shutdown()`` (or use ``with``) to stop
    it. With ``local-cluster`` masters, give ``num_cpus_worker_node=1``."""
    import ray
    from ray.util.spark import setup_ray_cluster

    if ray.is_initialized():
        raise InvalidArgumentError("this process is already connected to a Ray cluster: "
                                   "ray.shutdown() first")
    os.environ["PATH"] = with_bin_dir(os.environ.get("PATH", ""))  # Ray-on-Spark runs `ray`
    os.environ["RAY_ON_SPARK_START_HOOK"] = f"{__name__}.NodeEnvHook"
    if ray_token() is not None:  # the nodes get the token (NodeEnvHook); setup_ray_cluster
        join_with_token()        # then joins them by address from this process
    with _head_wait_by_port():
        address, _ = setup_ray_cluster(
            max_worker_nodes=max_worker_nodes, num_cpus_worker_node=num_cpus_worker_node,
            head_node_options={"include_dashboard": False, **(head_node_options or {})},
            **setup_options)
    handle = RayOnSpark(address, url, store_name, options or Options(), ray_token())
    try:
        ensure_ray(address)
        try:
            handle._store = open_store(url, options, name=store_name)
        except InvalidArgumentError:
            connect(store_name)  # already running there
    except BaseException:
        handle.shutdown()
        raise
    return handle


@contextlib.contextmanager
def _head_wait_by_port():
    """While ``setup_ray_cluster`` runs: wait for the head node until its port answers, not a
    fixed time. Ray-on-Spark sleeps ``_RAY_HEAD_STARTUP_TIMEOUT`` (20 s) after starting the
    head, then checks its port once; the head is up in a few seconds, so here the check polls
    for at most that long and the sleep is none. Left as it is if this Ray lacks either name."""
    from ray.util.spark import cluster_init

    limit = getattr(cluster_init, "_RAY_HEAD_STARTUP_TIMEOUT", None)
    probe = getattr(cluster_init, "is_port_in_use", None)
    if not isinstance(limit, (int, float)) or not callable(probe):
        yield
        return

    def head_port_up(host, port) -> bool:
        deadline = time.monotonic() + limit
        while not probe(host, port):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    cluster_init._RAY_HEAD_STARTUP_TIMEOUT, cluster_init.is_port_in_use = 0, head_port_up
    try:
        yield
    finally:
        cluster_init._RAY_HEAD_STARTUP_TIMEOUT, cluster_init.is_port_in_use = limit, probe
