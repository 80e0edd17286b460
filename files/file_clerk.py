"""The file clerk's state machine and its reads, shared by the SST and journal clerks
(:mod:`.clerk`): the moves a file makes (``reading -> delete_pending -> deleted``), loads of a
cached part made once however many readers ask, and byte ranges read through the node's disk
cache (:mod:`.disk_cache`) before the object store."""

from __future__ import annotations

import asyncio
import contextvars
import enum
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..errors import CorruptObjectError, LeveledError
from .disk_cache import DiskTier
from .framing import FOOTER_READ
from .lru import LruCache
from .store import NotFound, ObjectStore
from .sync import off_loop


class Host(Protocol):
    """What a clerk reads through (:class:`~leveled_ray.files.clerk.ClerkHost`)."""

    store: ObjectStore
    cache: LruCache
    disk: DiskTier | None

    def forget(self, name: str) -> None: ...

class _LoadAbandoned(Exception):
    """A shared load whose reader was cancelled: the others waiting for it load it again."""


class NotOnDisk(_LoadAbandoned):
    """A read of bytes the node's disk cache lacks, in a task that reads from it alone (see
    :data:`DISK_ONLY`); others waiting for the same load make it themselves."""


#: Set in a warm start's task (:mod:`.warm_start`): its reads take bytes from the node's disk
#: cache alone, and raise :class:`NotOnDisk` for the rest (it asks the object store for none).
DISK_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("disk_only", default=False)

class FileState(str, enum.Enum):
    READING = "reading"
    DELETE_PENDING = "delete_pending"
    DELETED = "deleted"


#: The only moves a clerk can make.
TRANSITIONS: dict[FileState, frozenset[FileState]] = {
    FileState.READING: frozenset({FileState.DELETE_PENDING}),
    FileState.DELETE_PENDING: frozenset({FileState.DELETED}),
    FileState.DELETED: frozenset(),
}


class FileStateError(LeveledError):
    """A clerk was asked for a move its state machine does not allow (an internal bug)."""


class FileClerk:
    """The state machine of one file, plus its cached reads."""

    kind = "file"

    def __init__(self, host: Host, name: str, size: int,
                 state: FileState = FileState.READING):
        self.host = host
        self.name = name
        self.size = size
        self.state = state
        self.removed_in: int | None = None  # manifest id whose change removed this file
        self._loading: dict[Any, asyncio.Future] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.state.value})"

    def move(self, new: FileState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise FileStateError(f"{self.name}: cannot move from {self.state.value} to {new.value}")
        self.state = new

    def retire(self, removed_in: int) -> None:
        """A committed manifest change (version ``removed_in``) removed this file: it keeps
        serving reads until its owner allows the delete."""
        self.move(FileState.DELETE_PENDING)
        self.removed_in = removed_in

    async def delete(self) -> None:
        """Delete the object (the owner said yes, and no read of an older view is running).
        If the delete fails, the file stays ``delete_pending`` and is tried again."""
        await self.host.store.delete_async(self.name)
        self.move(FileState.DELETED)
        self.host.forget(self.name)

    def _check_readable(self) -> None:
        if self.state not in (FileState.READING, FileState.DELETE_PENDING):
            raise FileStateError(f"{self.name} is {self.state.value}: it cannot be read")

    async def _cached(self, part, load: Callable[[], Awaitable[Any]], nbytes) -> Any:
        """A cached part of this file, loading it once even when many readers ask at once."""
        key = (self.name, part)
        value = self.host.cache.get(key)
        if value is not None:
            return value
        loop = asyncio.get_running_loop()
        loading = (part, loop)  # a host shared by several event loops keeps their loads apart
        while (pending := self._loading.get(loading)) is not None:
            try:
                return await asyncio.shield(pending)
            except _LoadAbandoned:  # its reader was cancelled, not this one: load it here
                continue
        fut = loop.create_future()
        self._loading[loading] = fut
        try:
            value = await load()
            self.host.cache.put(key, value, nbytes(value))
            fut.set_result(value)
            return value
        except BaseException as exc:
            fut.set_exception(_LoadAbandoned() if isinstance(exc, asyncio.CancelledError)
                              else exc)
            fut.exception()  # mark retrieved: the caller re-raises it
            raise
        finally:
            del self._loading[loading]

    async def _footer_bytes(self, span, guess: int = FOOTER_READ) -> bytes:
        """The file's last bytes, covering its footer: one ranged GET of ``guess`` bytes, or
        two when the footer is larger. ``span(size, tail, path)`` locates the footer."""
        tail = await self._range(max(0, self.size - guess), self.size)
        foff, _ = span(self.size, tail, self.name)
        if self.size - foff > len(tail):
            tail = await self._range(foff, self.size)
        return tail

    async def _range(self, lo: int, hi: int):
        """Bytes ``lo`` to ``hi`` of the file, for a point read: from the node's disk cache
        when it holds them, else from the object store (and then kept on disk)."""
        if self.host.disk is None and not DISK_ONLY.get():
            return await self._read(self.host.store.get_range_async, lo, hi)
        return (await self._ranges([lo], [hi]))[0]

    async def _ranges(self, starts: list[int], ends: list[int]) -> list:
        """:meth:`_range` of many spans: those the disk cache lacks in one request."""
        disk = self.host.disk
        if disk is None and not DISK_ONLY.get():
            return await self._read(self.host.store.get_ranges_async, starts, ends)
        spans = list(zip(starts, ends))
        found = [None] * len(spans) if disk is None else await disk.get_many(
            self.name, spans, count_misses=not DISK_ONLY.get())
        missing = [i for i, data in enumerate(found) if data is None]
        if missing and DISK_ONLY.get():
            raise NotOnDisk(self.name)
        if missing:
            read = await self._read(self.host.store.get_ranges_async,
                                    [starts[i] for i in missing], [ends[i] for i in missing])
            for i, data in zip(missing, read):
                found[i] = data
                disk.put(self.name, *spans[i], data)  # type: ignore[union-attr]
        return found

    async def _warm_blocks(self, ids: list[int], count: int,
                           span: Callable[[int], tuple[int, int]],
                           decode: Callable[[list[tuple[int, int, bytes]]], list],
                           fill: float) -> tuple[int, int]:
        """A warm start's load (:mod:`.warm_start`): of blocks ``ids`` (of ``count``, each
        at ``span(i)``) that the host's cache lacks, those the node's disk cache holds, with
        no request to the object store, decoded in a thread by ``decode`` (of ``(i, offset,
        bytes)`` each, in order) and put into the host's cache while it holds less than
        ``fill`` of its budget (it pushes nothing out). How many it loaded, and how many the
        disk cache lacked."""
        cache = self.host.cache
        ids = sorted(i for i in set(ids)
                     if 0 <= i < count and (self.name, ("block", i)) not in cache)
        spans = [span(i) for i in ids]
        held = [None] * len(ids) if self.host.disk is None else await self.host.disk.get_many(
            self.name, spans, count_misses=False)
        found = [(i, lo, raw) for i, (lo, _), raw in zip(ids, spans, held) if raw is not None]
        loaded = 0
        for (i, _, _), block in zip(found, await off_loop(decode, found) if found else []):
            if cache.used + block.nbytes > fill * cache.budget:
                break
            cache.put((self.name, ("block", i)), block, block.nbytes)
            loaded += 1
        return loaded, len(ids) - len(found)

    async def _read(self, read, *args):
        """``read(name, *args)``, a read of this file. It is listed in a manifest version that
        something reads, so a missing object is damage (:class:`CorruptObjectError` naming
        it), not a request that a retry could mend."""
        try:
            return await read(self.name, *args)
        except NotFound:
            raise CorruptObjectError(self.name, 0, "listed in the manifest, but missing from "
                                     "the object store") from None
