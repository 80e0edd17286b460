"""A fault-injecting object store, for fault tests (SlateDB keeps one in its simulation crate).

It wraps the real client's single requests, beneath every retry and resolution rule of
:class:`~.store.ObjectStore`, so those rules run exactly as they do against a faulty network.
A matching request fails *before* reaching the store (a refused connection: surely not applied;
or, with ``reply="timeout"``, a timeout: the writer cannot tell), or *after* the store applied
it (a lost reply: the outcome is unknown to the writer); with ``reply="exists"`` an applied
create is answered "already exists", as a client's own retry of a create that had landed
would be. The store pickles with its rules, so every actor of a store
gets the same faults; each process counts its own matching requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..files.store import ObjectStore
from ..files.store_config import StoreConfig

#: Request names a :class:`Fault` may match (a create is ``put_if_absent``).
OPS = ("get", "get_range", "get_ranges", "head", "list", "put", "put_if_absent", "delete")


@dataclass(frozen=True)
class Fault:
    """Fail requests ``op`` on paths starting with ``prefix``: from the ``after``-th matching
    request (0-based), ``count`` times. ``applied=True`` lets the request reach the store
    first; ``reply`` is ``"error"`` (a refused connection, or a lost reply when applied),
    ``"timeout"`` (a request that timed out, applied or not) or ``"exists"`` (only for an
    applied create)."""

    op: str
    prefix: str = ""
    after: int = 0
    count: int = 1
    applied: bool = False
    reply: str = "error"

    def __post_init__(self):
        if self.op not in OPS or self.reply not in ("error", "timeout", "exists"):
            raise ValueError(f"unknown fault {self}")
        if self.reply == "exists" and not (self.applied and self.op == "put_if_absent"):
            raise ValueError("reply='exists' is for applied creates")


class _FaultyBackend:
    """The backend's requests, with the faults applied."""

    def __init__(self, inner, faults: tuple[Fault, ...]):
        self.inner = inner
        self.atomic = inner.atomic
        self.faults = faults
        self.seen = [0] * len(faults)

    def _fault(self, op: str, path: str) -> Fault | None:
        for i, fault in enumerate(self.faults):
            if fault.op == op and path.startswith(fault.prefix):
                n = self.seen[i]
                self.seen[i] += 1
                if fault.after <= n < fault.after + fault.count:
                    return fault
        return None

    async def _run(self, op: str, path: str, method: str, *args):
        fault = self._fault(op, path)
        if fault is not None and not fault.applied:
            if fault.reply == "timeout":
                raise TimeoutError(f"injected fault: {op} {path!r} (timed out, not applied)")
            raise ConnectionRefusedError(f"injected fault: {op} {path!r} (not sent)")
        result = await getattr(self.inner, method)(path, *args)
        if fault is None:
            return result
        if fault.reply == "exists":
            raise FileExistsError(f"injected fault: {op} {path!r} (applied, then 'exists')")
        raise TimeoutError(f"injected fault: {op} {path!r} (applied, reply lost)")

    async def put(self, path, data, create):
        return await self._run("put_if_absent" if create else "put", path, "put", data, create)

    def __getattr__(self, method):
        return lambda path, *args: self._run(method, path, method, *args)


class FaultInjectingStore(ObjectStore):
    def __init__(self, config: StoreConfig, faults: tuple[Fault, ...] = ()):
        self.faults = tuple(faults)
        super().__init__(config)

    @classmethod
    def wrap(cls, url: str, *faults: Fault, options=None) -> FaultInjectingStore:
        return cls(StoreConfig.from_options(url, options), faults)

    def __reduce__(self):
        return (self.__class__, (self.config, self.faults))

    def _make_backend(self):
        return _FaultyBackend(super()._make_backend(), self.faults)

    @property
    def seen(self) -> list[int]:
        """How many requests matched each fault, in this process."""
        return self._backend.seen
