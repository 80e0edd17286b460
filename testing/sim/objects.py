"""The simulation's object store: every object of a world in one dict, reached through
requests that the world's scheduler interleaves and that fail as a network does.

Each request travels as a step of the *network*, not of the process that sent it: a request
sent by a process that dies still lands (or not) as it would have, and only its answer is lost.
A request meets at most one fault, drawn from the world's seeded ``rng`` at ``fault_rate``:

* ``refused``: the store never saw it (a refused connection: surely not applied);
* ``dropped``: it timed out before it reached the store (the sender cannot tell);
* ``lost``: the store applied it, then its answer was lost (the sender cannot tell);
* ``late``: it reaches the store up to :data:`LATE_S` seconds late, after later requests
  (the store client then sends a copy beside it, hedging, as on S3).

The backend has the interface of :class:`leveled_ray.files.store.ObjectStore`'s backends,
so every retry, resolution and classification rule above it runs as it does on S3.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from sortedcontainers import SortedDict

from leveled_ray.files.backends import ObjectMeta

from .loop import EPOCH, process_context

#: Kinds of faults, and the longest a late request waits.
FAULTS = ("refused", "dropped", "lost", "late")
LATE_S = 2.0
#: A request's own latency, up to this (virtual seconds): requests overtake each other.
LATENCY_S = 0.002


class SimObjects:
    """The objects of one world, and the faults of its requests."""

    def __init__(self, rng: random.Random, loop):
        self.rng = rng
        self.loop = loop
        #: By path, in order: a listing reads only the paths under its prefix.
        self.objects: SortedDict[str, tuple[bytes, float]] = SortedDict()
        self.fault_rate = 0.0
        self.faults: Counter = Counter()
        self.requests = 0
        self._network = process_context("network")  # its steps run in turn: one context serves

    def backend(self, location: str) -> SimBackend:
        return SimBackend(self, location.strip("/"))

    def paths(self, prefix: str = "") -> list[str]:
        return list(self.under(prefix))

    def under(self, prefix: str, after: str | None = None):
        """The paths that start with ``prefix`` (and come after ``after``), in order."""
        past = after is not None and after >= prefix
        for path in self.objects.irange(minimum=after if past else prefix,
                                        inclusive=(not past, True)):
            if not path.startswith(prefix):
                return
            yield path

    def _fault(self) -> str | None:
        self.requests += 1
        if self.fault_rate and self.rng.random() < self.fault_rate:
            fault = self.rng.choice(FAULTS)
            self.faults[fault] += 1
            return fault
        return None

    async def request(self, apply):
        """Run ``apply()`` (the store's side of one request) as the network carries it."""
        fault = self._fault()
        delay = self.rng.random() * LATENCY_S + (self.rng.random() * LATE_S
                                                  if fault == "late" else 0.0)
        answer = self.loop.create_future()
        # One step of the network (a callback: cheaper than a task, and it never waits).
        self.loop.call_later(delay, self._deliver, apply, fault, answer, context=self._network)
        # A caller that stops waiting (a timeout) cancels only ``answer``: the request still
        # lands, and its answer is heard by no one, as on a network.
        result = await answer
        if fault == "lost":
            raise TimeoutError("simulated fault: the answer was lost (the request landed)")
        return result

    @staticmethod
    def _deliver(apply, fault: str | None, answer: asyncio.Future) -> None:
        try:
            if fault == "refused":
                raise ConnectionRefusedError("simulated fault: connection refused (not sent)")
            if fault == "dropped":
                raise TimeoutError("simulated fault: timed out before it reached the store")
            result = apply()
        except Exception as exc:  # noqa: BLE001 - the store's answer, handed to its caller
            if not answer.done():
                answer.set_exception(exc)
        else:
            if not answer.done():
                answer.set_result(result)


class SimBackend:
    """One store's requests (its URL's location is the prefix of its objects' paths)."""

    #: As S3: requests cross a network, so a slow one is hedged (a copy sent beside it, and
    #: both may land: a create's copy finds the name taken by the first).
    atomic = False

    def __init__(self, objects: SimObjects, location: str):
        self.world = objects
        self.base = location + "/"

    def _full(self, path: str) -> str:
        return self.base + path

    def _read(self, path: str) -> bytes:
        found = self.world.objects.get(self._full(path))
        if found is None:
            raise FileNotFoundError(path)
        return found[0]

    @staticmethod
    def _slice(data: bytes, start: int, end: int) -> bytes:
        if start >= len(data) and (start or end):
            raise ValueError("Requested range was invalid: it starts past the object's end")
        return data[start:end]

    async def get(self, path):
        return await self.world.request(lambda: self._read(path))

    async def get_range(self, path, start, end):
        return await self.world.request(lambda: self._slice(self._read(path), start, end))

    async def get_ranges(self, path, starts, ends):
        def ranges():
            data = self._read(path)
            return [self._slice(data, s, e) for s, e in zip(starts, ends)]

        return await self.world.request(ranges)

    async def put(self, path, data, create):
        def write():
            full = self._full(path)
            if create and full in self.world.objects:
                raise FileExistsError(path)
            self.world.objects[full] = (bytes(data), EPOCH + self.world.loop.now)

        return await self.world.request(write)

    async def list(self, prefix, offset):
        def listing():
            objects = self.world.objects
            after = None if offset is None else self._full(offset)
            return [ObjectMeta(p[len(self.base):], len(objects[p][0]), objects[p][1])
                    for p in self.world.under(self._full(prefix), after)]

        return await self.world.request(listing)

    async def head(self, path):
        def head():
            data, at = self.world.objects.get(self._full(path), (None, 0.0))
            if data is None:
                raise FileNotFoundError(path)
            return ObjectMeta(path, len(data), at)

        return await self.world.request(head)

    async def delete(self, path):
        return await self.world.request(lambda: self.world.objects.pop(self._full(path), None))
