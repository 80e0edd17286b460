"""``lr.replicate``: a :class:`~.replicator.Replication` run in a Ray actor, which opens the
target store itself and which Ray restarts if its process dies (it then resumes from the
position the target holds)."""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import threading

from ..actors.remote import NAMESPACE
from ..client.calls import _get, read_call
from ..client.ray_connection import ensure_ray
from ..entry_points import open as open_store
from ..errors import InvalidArgumentError
from ..files.store import ObjectStore
from ..files.store_config import same_store
from ..options import Options
from .replicator import Replication, check_name

#: The replicator's Ray metrics (``leveled_replication_<field>``, tagged ``replication``).
METRICS = {"lag_changes": "changes acknowledged by the source and not yet on the target",
           "lag_s": "delay of the last batch applied (from its oldest change's "
                    "acknowledgement on the source), 0 once caught up, in seconds",
           "applied": "changes applied to the target since the replicator started"}
METRICS_S = 1.0


def check_target(source_url: str, target_url: str, options: Options | None) -> None:
    """Refuse (``InvalidArgumentError``, nothing made) a target URL that is bad, names a file,
    or names the source however spelled: the replicator opens its target as the writer, and
    opening the source so would fence the source's own writer. Checked by :func:`replicate`
    in the caller's process, and again by the replicator before each open of its target."""
    ObjectStore.from_url(target_url, options)  # a client makes no directory until it writes
    if same_store(target_url, source_url):
        raise InvalidArgumentError(f"the target must be another store's URL, not "
                                   f"{target_url!r} (the source's)")


class ReplicatorActor:
    """Opens the target, then replicates in a thread of its own until closed."""

    def __init__(self, source: bytes, target_url: str, name: str, full_sync_s: float,
                 target_options: Options | None):
        source = pickle.loads(source)
        check_target(source.url, target_url, target_options)  # a restart checks it again
        self.target = open_store(target_url, target_options)
        self.replication = Replication(source, self.target, name, full_sync_s=full_sync_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=asyncio.run,
                                        args=(self.replication.run(self._stop),), daemon=True)
        self._thread.start()
        threading.Thread(target=self._publish, daemon=True).start()

    def _publish(self) -> None:
        """The lag and the changes applied, as Ray metrics, every :data:`METRICS_S` seconds."""
        from ray.util import metrics

        tag = {"replication": self.replication.name}
        gauges = {field: metrics.Gauge(f"leveled_replication_{field}", text, ("replication",))
                  for field, text in METRICS.items()}
        while not self._stop.wait(METRICS_S):
            stats = self.replication.stats()
            for field, gauge in gauges.items():
                gauge.set(stats[field], tags=tag)

    def stats(self) -> dict:
        return {**self.replication.stats(), "pid": os.getpid()}

    def full_sync(self) -> dict:
        return asyncio.run(self.replication.full_sync())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        asyncio.run(self.replication.close())
        self.target.close()


class ReplicatorHandle:
    """A handle on a running replication (picklable): :meth:`stats`, :meth:`full_sync`,
    :meth:`close`."""

    def __init__(self, actor, name: str):
        self._actor, self.name = actor, name

    def __reduce__(self):
        return (ReplicatorHandle, (self._actor, self.name))

    def stats(self) -> dict:
        """Changes applied, the position (the source's SQN, or each shard's), the lag behind
        the source in changes and seconds (``lag_changes``, ``lag_s``), the delays of recent
        batches (``delay_p50_s``, ``delay_p99_s``: from a change's acknowledgement on the source
        to its batch's on the target), full syncs and their
        repairs, the foreign writes they found on the target, and errors. Cost: one round
        trip."""
        return read_call(self._actor.stats.remote).run()

    def full_sync(self) -> dict:
        """Compare the source and the target now, and repair what the stream missed; returns
        the counts of copies, deletes and foreign writes found. Cost: a tictac compare of the
        two stores (a fold of each side's heads), then a write per repair."""
        return _get(self._actor.full_sync.remote())

    def close(self) -> None:
        """Stop replicating (the next :func:`replicate` under this name resumes where this
        one stopped) and close the target. Cost: one round trip."""
        import ray

        try:
            _get(self._actor.close.remote())
        finally:
            ray.kill(self._actor, no_restart=True)


def _running(actor_name: str) -> bool:
    import ray

    try:
        ray.get_actor(actor_name, namespace=NAMESPACE)
    except ValueError:  # no actor of that name
        return False
    return True


def replicate(source, target_url: str, *, name: str | None = None,
              full_sync_s: float = 3600.0, target_options: Options | None = None,
              detached: bool = False) -> ReplicatorHandle:
    """Keep the store at ``target_url`` in sync with the running store ``source`` (a handle,
    plain or sharded); see :mod:`leveled_ray.replication.replicator`. The target is opened as
    its writer by the replicator, a Ray actor (named ``replicate.<name>``; ``detached=True``
    keeps it past this driver) that Ray restarts if its process dies. It resumes after the
    last change the target holds, under ``name`` (default: the source's name or URL, with
    the target's URL). Every ``full_sync_s`` seconds a tictac compare repairs what the stream
    missed (0: only on :meth:`ReplicatorHandle.full_sync`). Bad input raises
    ``InvalidArgumentError`` and starts nothing."""
    if not hasattr(source, "listen") or not hasattr(source, "stats_async"):
        raise InvalidArgumentError(f"the source must be a running store's handle, not "
                                   f"{source!r}")
    check_target(source.url, target_url, target_options)
    name = check_name(name if name is not None else
                      f"{source.name or source.url}->{target_url}".replace("/", "|"))
    if (not isinstance(full_sync_s, (int, float)) or isinstance(full_sync_s, bool)
            or not math.isfinite(full_sync_s) or full_sync_s < 0):
        raise InvalidArgumentError(f"full_sync_s must be a finite number >= 0, not "
                                   f"{full_sync_s!r}")
    ensure_ray()
    import ray

    if _running(f"replicate.{name}"):
        raise InvalidArgumentError(f"a replicator named {name!r} runs already")

    opts = {"namespace": NAMESPACE, "name": f"replicate.{name}", "max_restarts": -1,
            "num_cpus": 0, "max_concurrency": 4}
    if detached:
        opts["lifetime"] = "detached"
    # The source's handle travels pickled: a Ray argument holding actor handles would live
    # in this driver's object store, and a restart after the driver is gone would fail.
    actor = ray.remote(ReplicatorActor).options(**opts).remote(
        ray.cloudpickle.dumps(source), target_url, name, full_sync_s, target_options)
    handle = ReplicatorHandle(actor, name)
    try:
        handle.stats()  # started: the constructor opened the target
    except BaseException:
        ray.kill(actor, no_restart=True)  # a replicator that did not start keeps no name
        raise
    return handle
