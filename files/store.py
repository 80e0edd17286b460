"""The object store: one interface over obstore for ``memory://``, ``file://`` and ``s3://`` URLs.

Everything in a store is an immutable object, and every protocol is built on put-if-absent
alone (obstore's local store has no If-Match). Paths are relative to the store's root and are
validated so they cannot escape it. ``memory://name`` stores live in a named Ray actor when Ray
is running (so every actor of a store sees the same objects) and in this process otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CorruptObjectError, LeveledError, ObjectStoreError
from ..options import Options, redact
from .backends import ObjectMeta, make_backend
from .failures import classify, first_line, ranges_or_short
from .names import file_kind
from .outcomes import (
    AttemptError,
    Created,
    Failure,
    Latencies,
    Unsettled,
    hedged,
    retry,
    settle_create,
)
from .store_config import StoreConfig, check_path
from .sync import with_sync_twins

#: Requests that are hedged (see :func:`~.outcomes.hedged`): reads of a known, small size, and
#: creates of at most this many bytes (a copy of a larger upload would cost bandwidth).
HEDGE_MAX_BYTES = 1 << 20
#: A request is never hedged sooner than this.
HEDGE_FLOOR_S = 0.05

class NotFound(ObjectStoreError):
    """An object that should exist does not."""

    def __init__(self, path: str):
        super().__init__(f"object {path!r} does not exist", definite=True, path=path)

    def __reduce__(self):
        return (NotFound, (self.path,))



def _store_error(failure: Failure, cause: BaseException | None, op: str, path: str | None,
                 *, maybe_applied: bool = False) -> LeveledError:
    """The typed error for a request that failed for good."""
    if failure is Failure.MISSING:
        return NotFound(path or "")
    if failure is Failure.SHORT:
        return CorruptObjectError(path or "", 0, f"shorter than the range {op} asked for "
                                  f"(truncated): {first_line(cause)}")
    if failure is Failure.DENIED:
        return ObjectStoreError(f"{op} {path!r}: access denied: {first_line(cause)}", definite=True,
                                path=path)
    return ObjectStoreError(f"{op} {path!r} failed: {first_line(cause)}",
                            definite=not maybe_applied, path=path)



@dataclass
class IoStats:
    """Requests and bytes this process sent to the object store, and how failures went:
    ``retries`` attempts repeated after a transient failure, ``hedges`` second copies sent of
    slow requests, ``errors`` requests that failed for good, ``resolved`` creates whose
    outcome was learnt by reading the object back, and ``sealed`` names sealed so that a write
    of unknown outcome can never land."""

    puts: int = 0
    put_bytes: int = 0
    gets: int = 0
    get_bytes: int = 0
    lists: int = 0
    deletes: int = 0
    heads: int = 0
    retries: int = 0
    hedges: int = 0
    errors: int = 0
    resolved: int = 0
    sealed: int = 0
    #: Requests, retries and errors by operation and file kind: ``{(what, op, kind): count}``
    #: (``what`` is ``requests``, ``retries`` or ``errors``; see :func:`file_kind`).
    by_request: dict = field(default_factory=dict)

    def note(self, what: str, op: str, path: str) -> None:
        key = (what, op, file_kind(path))
        self.by_request[key] = self.by_request.get(key, 0) + 1

    def as_dict(self) -> dict:
        """The totals, and ``requests_by``/``retries_by``/``errors_by`` as
        ``{op: {kind: count}}``."""
        out = {k: v for k, v in self.__dict__.items() if k != "by_request"}
        for what in ("requests", "retries", "errors"):
            out[f"{what}_by"] = {}
        for (what, op, kind), n in self.by_request.items():
            out[f"{what}_by"].setdefault(op, {})[kind] = n
        return out



@with_sync_twins
class ObjectStore:
    """get, ranged get, put, put-if-absent, list, head and delete under one store root.

    Every request is retried after a transient failure within :class:`RetryPolicy` bounds;
    then it raises :class:`ObjectStoreError` (``definite`` says whether a write may have
    happened). A missing object raises :class:`NotFound` from the gets and gives ``None``
    from ``head``. Each call is an ``*_async`` coroutine with a synchronous twin.
    The object pickles as its configuration, so it can be handed to Ray actors and tasks.
    """

    def __init__(self, config: StoreConfig):
        self.config = config
        self.scheme, self.location, self.prefix = config.scheme, config.location, config.prefix
        self.stats = IoStats()
        self._backend = self._make_backend()
        # Only network requests are hedged: a local one answers before a copy could help.
        # Reads and creates keep apart latencies: their sizes differ.
        settings = config.settings
        self.latencies = None if self._backend.atomic or not settings.hedge_requests else {
            write: Latencies(HEDGE_FLOOR_S, settings.request_timeout_s / 2)
            for write in (False, True)}

    @classmethod
    def from_url(cls, url: str, options: Options | None = None) -> ObjectStore:
        return cls(StoreConfig.from_options(url, options))

    def __reduce__(self):
        return (self.__class__, (self.config,))

    def __repr__(self) -> str:
        return f"ObjectStore({self.config.url!r})"

    @property
    def url(self) -> str:
        return self.config.url

    def _error(self, failure: Failure, cause: BaseException | None, op: str, path: str | None,
               *, maybe_applied: bool = False) -> LeveledError:
        """:func:`_store_error`, with this store's credentials kept out of the message (a
        client's error text may quote its configuration)."""
        exc = _store_error(failure, cause, op, path, maybe_applied=maybe_applied)
        if not isinstance(exc, ObjectStoreError) or isinstance(exc, NotFound) \
                or not self._secrets():
            return exc
        return ObjectStoreError(redact(exc.args[0], self._secrets()), definite=exc.definite,
                                path=exc.path)

    def _secrets(self) -> list[str]:
        return self.config.settings.secrets()

    def _make_backend(self):
        """The client (the seam where the fault tools wrap it)."""
        return make_backend(self.config, self.scheme, self.location, self.prefix)

    # -- the request loop --

    async def _attempt(self, call, *, hedge: bool = False, write: bool = False):
        """One attempt of a request (two, hedged, when a network request is slow)."""
        if not hedge or self.latencies is None:
            return await self._once(call)
        latencies = self.latencies[write]
        started = time.monotonic()
        result, extra = await hedged(lambda: self._once(call), latencies.hedge_after)
        if extra:
            self.stats.hedges += 1
        else:
            latencies.add(time.monotonic() - started)
        return result

    async def _once(self, call):
        try:
            return await call()
        except Exception as exc:
            raise AttemptError(classify(exc, atomic=self._backend.atomic), exc) from None

    def _on_retry(self, op: str, path: str):
        """Counts each retry of a request (see :meth:`IoStats.note`)."""
        stats = self.stats

        def retried(_exc: AttemptError) -> None:
            stats.retries += 1
            stats.note("retries", op, path)

        return retried

    async def _request(self, op: str, path: str, call, *, write: bool = False,
                       hedge: bool = True):
        # ``hedge`` only where a copy of the request is harmless and cheap (see HEDGE_MAX_BYTES)
        """One request, retried while it fails transiently (see :class:`RetryPolicy`)."""
        self.stats.note("requests", op, path)
        try:
            return await retry(lambda: self._attempt(call, hedge=hedge), self.config.retry,
                               on_retry=self._on_retry(op, path))
        except AttemptError as exc:
            if exc.failure is not Failure.MISSING:
                self.stats.errors += 1
                self.stats.note("errors", op, path)
            maybe = write and exc.failure is Failure.UNKNOWN
            raise self._error(exc.failure, exc.cause, op, path, maybe_applied=maybe) from None

    # -- reads --

    async def get_async(self, path: str) -> bytes:
        check_path(path)
        data = await self._request("get", path, lambda: self._backend.get(path), hedge=False)
        self._count_get(len(data))
        return data

    async def get_range_async(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object (fewer if the object is shorter)."""
        check_path(path)
        data = await self._request("get_range", path,
                                   lambda: self._backend.get_range(path, start, end),
                                   hedge=end - start <= HEDGE_MAX_BYTES)
        self._count_get(len(data))
        return data

    async def get_ranges_async(self, path: str, starts: list[int], ends: list[int]) -> list:
        """Several byte ranges of one object in one request (nearby ranges are coalesced), as
        buffers (``obstore.Bytes``: sliced and compared like ``bytes``, read through a
        ``memoryview``) not copied into ``bytes``: block decoders read them once."""
        check_path(path)
        small = sum(e - s for s, e in zip(starts, ends)) <= HEDGE_MAX_BYTES
        parts = await self._request(
            "get_ranges", path,
            lambda: ranges_or_short(lambda: self._backend.get_ranges(path, starts, ends)),
            hedge=small)
        self._count_get(sum(map(len, parts)))
        return parts

    async def head_async(self, path: str) -> ObjectMeta | None:
        check_path(path)
        self.stats.heads += 1
        try:
            return await self._request("head", path, lambda: self._backend.head(path))
        except NotFound:
            return None

    async def list_async(self, prefix: str, offset: str | None = None) -> list[ObjectMeta]:
        """Objects whose path starts with ``prefix`` (after ``offset`` if given), in path order."""
        check_path(prefix.rstrip("/"))
        self.stats.lists += 1
        items = await self._request("list", prefix, lambda: self._backend.list(prefix, offset))
        return sorted(items, key=lambda m: m.path)

    # -- writes --

    async def put_async(self, path: str, data: bytes) -> None:
        """Write an object, replacing any object of that name (used only by backup copies:
        resending the same bytes is harmless)."""
        check_path(path)
        self._count_put(len(data))
        await self._request("put", path, lambda: self._backend.put(path, data, False),
                            write=True, hedge=False)

    async def put_if_absent_async(self, path: str, data: bytes, *,
                                  ident: int | None = None, unique: bool = False) -> bool:
        """Create an object: ``True`` when this call's bytes hold the name, ``False`` (and no
        change) when another writer's object does.

        A retried create learns its own outcome: when an attempt may have landed, or the
        answer is "already exists", the object there is read back and its first ``ident``
        bytes (a write token in its header; default: all of it) are compared with ours.
        ``unique`` names are never reused by anyone, so an object there is ours. Raises
        :class:`ObjectStoreError` when the outcome is still unknown after ``resolve_s``
        (``definite=False``), or when no attempt reached the store (``definite=True``).
        """
        check_path(path)
        mine = data if ident is None else data[:ident]
        self._count_put(len(data))
        self.stats.note("requests", "put_if_absent", path)

        small = len(data) <= HEDGE_MAX_BYTES

        async def send():
            await self._attempt(lambda: self._backend.put(path, data, True), hedge=small,
                                write=True)

        async def read_back():
            self.stats.resolved += 1
            try:
                if unique:
                    await self._attempt(lambda: self._backend.head(path), hedge=True)
                    return mine
                if ident is None:
                    return await self._attempt(lambda: self._backend.get(path))
                return await self._attempt(lambda: self._backend.get_range(path, 0, ident),
                                           hedge=True)
            except AttemptError as exc:
                if exc.failure is Failure.MISSING:
                    return None
                raise

        try:
            created, _ = await settle_create(send, read_back, mine, self.config.retry,
                                             self.config.settings.write_resolve_s,
                                             on_retry=self._on_retry("put_if_absent", path))
        except Unsettled as exc:
            self.stats.errors += 1
            self.stats.note("errors", "put_if_absent", path)
            raise self._error(Failure.UNKNOWN, exc.cause, "put_if_absent", path,
                               maybe_applied=exc.maybe_applied) from None
        return created is Created.MINE

    async def create_or_seal_async(self, path: str, data: bytes, seal: Callable[[], bytes], *,
                                   ident: int) -> Created:
        """Create ``data`` at a contested name, and settle it whatever happens: ``MINE``,
        ``THEIRS`` (another writer's object holds the name), or ``SEALED``.

        When the outcome is still unknown after ``resolve_s``, the name is taken with
        ``seal()`` (an object of this writer's that means "nothing", such as an empty fence,
        built only then): then the
        write can never land later, and the caller can report a definite failure. Raises
        :class:`ObjectStoreError` with ``definite=False`` only when the seal's outcome cannot
        be learnt either (the store stayed unreachable), and ``definite=True`` when no attempt
        reached the store.
        """
        try:
            ours = await self.put_if_absent_async(path, data, ident=ident)
            return Created.MINE if ours else Created.THEIRS
        except ObjectStoreError as exc:
            if exc.definite:
                raise
            unknown = exc
        try:
            if await self.put_if_absent_async(path, seal(), ident=ident):
                self.stats.sealed += 1
                return Created.SEALED
            there = await self.get_range_async(path, 0, ident)
        except ObjectStoreError as exc:
            raise ObjectStoreError(f"{unknown}; sealing it failed too: {exc}", definite=False,
                                   path=path) from None
        return Created.MINE if there == data[:ident] else Created.THEIRS

    async def delete_async(self, path: str) -> None:
        """Delete an object; deleting a missing object is not an error."""
        check_path(path)
        self.stats.deletes += 1
        try:
            await self._request("delete", path, lambda: self._backend.delete(path), write=True,
                                hedge=False)
        except NotFound:
            pass


    def _count_get(self, n: int) -> None:
        self.stats.gets += 1
        self.stats.get_bytes += n

    def _count_put(self, n: int) -> None:
        self.stats.puts += 1
        self.stats.put_bytes += n
