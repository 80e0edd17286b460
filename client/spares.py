"""Spare Bookies: Bookie processes started ahead, so that an open need not wait for one.

Starting a Bookie's process costs about a second and a half here (Ray starts a worker, which
imports the package): most of a plain open. A driver that opens stores often can keep
``count`` spares with :func:`keep_spare_bookies`. An open whose Bookie needs no name, lifetime
or scheduling of its own, and the spares' ``max_restarts``, takes a spare and hands it its
store (``assign``), if ``pickle`` can keep the Bookie's arguments; a new spare starts in the
background. Every other open starts its Bookie as before.

A spare that Ray restarts finds its store where ``assign`` kept it (Ray's key-value store), so
it fails over as any Bookie does. The spares belong to this driver's Ray job: they end with it,
or with ``keep_spare_bookies(0)``.
"""

from __future__ import annotations

import pickle
import threading

from ..actors import bookie as bookie_mod
from ..actors.remote import NAMESPACE
from ..errors import InvalidArgumentError
from ..options import Options

#: The ``max_restarts`` of every spare (an open that asks for another starts its own Bookie).
SPARE_RESTARTS = Options().max_restarts


class _Pool:
    def __init__(self):
        self.lock = threading.Lock()
        self.keep = 0
        self.job = None
        self.ready: list = []
        self.taken = 0


_pool = _Pool()


def keep_spare_bookies(count: int = 1) -> None:
    """Keep ``count`` Bookie processes started in this driver's Ray job, waiting for a store
    (0 stops the ones there are). Ray must be running; see the module docstring."""
    import ray

    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise InvalidArgumentError(f"count must be an int >= 0, not {count!r}")
    if not ray.is_initialized():
        raise InvalidArgumentError("keep_spare_bookies needs Ray running: call ray.init first")
    with _pool.lock:
        _same_job()
        _pool.keep = count
        while len(_pool.ready) > count:
            ray.kill(_pool.ready.pop(), no_restart=True)
        _refill()


def spare_stats() -> dict:
    """How many spares are kept and waiting, and how many opens took one."""
    with _pool.lock:
        return {"keep": _pool.keep, "waiting": len(_pool.ready), "taken": _pool.taken}


def take(*, plain: bool, options: Options, **kwargs) -> object | None:
    """A spare made the Bookie ``Bookie(options=options, **kwargs)``, or ``None`` if none
    fits or none is left. ``plain``: the Bookie needs no name, lifetime or scheduling of its
    own. The arguments must pickle (``pickle``, not Ray's serializer: a restart reads them
    back from Ray's key-value store)."""
    import ray

    if not plain or options.max_restarts != SPARE_RESTARTS or not _pool.ready:
        return None  # (an unlocked look first: most opens have no spare to take)
    try:
        assignment = pickle.dumps({"options": options, **kwargs})
    except Exception:  # an object store client or clock that pickle cannot keep
        return None
    with _pool.lock:
        if not ray.is_initialized() or not _same_job() or not _pool.ready:
            return None
        actor = _pool.ready.pop(0)
        _refill()
    try:
        ray.get(actor.assign.remote(assignment))
    except ray.exceptions.RayError:  # the spare died (its node did): start one the plain way
        ray.kill(actor, no_restart=True)
        return None
    with _pool.lock:
        _pool.taken += 1
    return actor


def _same_job() -> bool:
    """Whether the spares belong to the Ray job running now (else they are forgotten: a new
    ``ray.init`` ended them)."""
    import ray

    job = ray.get_runtime_context().get_job_id()
    if job != _pool.job:
        _pool.job, _pool.ready, _pool.keep = job, [], 0
        return False
    return True


def _refill() -> None:
    while len(_pool.ready) < _pool.keep:
        _pool.ready.append(bookie_mod.make_actor().options(
            namespace=NAMESPACE, max_restarts=SPARE_RESTARTS).remote())
