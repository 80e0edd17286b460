"""Calling actors: unwrap Ray's exceptions into leveled-ray's, and run actor logic without Ray.

Actor logic is written against Ray's handle interface (``await handle.method.remote(...)``).
:class:`LocalHandle` gives a plain object that interface, so tests drive the same code in one
process.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import LeveledError, StoreClosedError

NAMESPACE = "leveled"


def unwrap(exc: BaseException) -> BaseException:
    """The leveled-ray error behind a Ray exception (or the exception itself)."""
    try:
        from ray import exceptions as rex
    except ImportError:  # pragma: no cover - ray is a dependency
        return exc
    seen = 0
    while isinstance(exc, rex.RayTaskError) and seen < 8:
        cause = getattr(exc, "cause", None)
        if cause is None:
            break
        exc, seen = cause, seen + 1
    if isinstance(exc, LeveledError):
        return exc
    if isinstance(exc, (rex.RayActorError, rex.ActorDiedError, rex.ActorUnavailableError)):
        return StoreClosedError(f"the store's actors are gone: {exc}")
    return exc


async def call(method, *args, **kwargs) -> Any:
    """``await method.remote(*args)``, raising leveled-ray errors rather than Ray's."""
    try:
        return await method.remote(*args, **kwargs)
    except Exception as exc:
        raise unwrap(exc) from None


class _LocalMethod:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        result = self._fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(result)
        return fut


class LocalHandle:
    """Gives a plain object the interface of a Ray actor handle, within one event loop."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _LocalMethod(getattr(self._obj, name))

    @property
    def local(self):
        return self._obj
