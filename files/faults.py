"""A fault-injecting object store, for fault tests (SlateDB keeps one in its simulation crate).

It wraps the real client: matching requests fail *before* reaching the store (a definite
failure) or fail *after* the store applied them (an indefinite one, as when a reply is lost).
It pickles with its rules, so every actor of a store gets the same faults; each process counts
its own matching requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ObjectStoreError
from .store import ObjectStore, StoreConfig


@dataclass(frozen=True)
class Fault:
    """Fail requests ``op`` on paths starting with ``prefix``: from the ``after``-th matching
    request (0-based), ``count`` times. ``applied=True`` lets the request reach the store first."""

    op: str
    prefix: str = ""
    after: int = 0
    count: int = 1
    applied: bool = False


_WRAPPED = ("get", "get_range", "get_ranges", "head", "list", "put", "put_if_absent", "delete")


class FaultInjectingStore(ObjectStore):
    def __init__(self, config: StoreConfig, faults: tuple[Fault, ...] = ()):
        super().__init__(config)
        self.faults = tuple(faults)
        self.seen = [0] * len(self.faults)

    @classmethod
    def wrap(cls, url: str, *faults: Fault, options=None) -> FaultInjectingStore:
        return cls(StoreConfig.from_options(url, options), faults)

    def __reduce__(self):
        return (self.__class__, (self.config, self.faults))

    def _fault(self, op: str, path: str) -> Fault | None:
        for i, fault in enumerate(self.faults):
            if fault.op == op and path.startswith(fault.prefix):
                n = self.seen[i]
                self.seen[i] += 1
                if fault.after <= n < fault.after + fault.count:
                    return fault
        return None

    @staticmethod
    def _error(fault: Fault, op: str, path: str) -> ObjectStoreError:
        return ObjectStoreError(f"injected fault: {op} {path!r}", definite=not fault.applied,
                                path=path)


def _wrap(op: str, is_async: bool):
    base = getattr(ObjectStore, op + ("_async" if is_async else ""))

    if is_async:
        async def method(self, path, *args, **kwargs):
            fault = self._fault(op, path)
            if fault is not None and not fault.applied:
                raise self._error(fault, op, path)
            result = await base(self, path, *args, **kwargs)
            if fault is not None:
                raise self._error(fault, op, path)
            return result
    else:
        def method(self, path, *args, **kwargs):
            fault = self._fault(op, path)
            if fault is not None and not fault.applied:
                raise self._error(fault, op, path)
            result = base(self, path, *args, **kwargs)
            if fault is not None:
                raise self._error(fault, op, path)
            return result
    method.__name__ = base.__name__
    return method


for _op in _WRAPPED:
    setattr(FaultInjectingStore, _op, _wrap(_op, False))
    setattr(FaultInjectingStore, _op + "_async", _wrap(_op, True))
