"""The object store: one interface over obstore for ``memory://``, ``file://`` and ``s3://`` URLs.

Everything in a store is an immutable object, and every protocol is built on put-if-absent
alone (obstore's local store has no If-Match). Paths are relative to the store's root and are
validated so they cannot escape it. ``memory://name`` stores live in a named Ray actor when Ray
is running (so every actor of a store sees the same objects) and in this process otherwise.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlparse

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.exceptions import (
    BaseError as ObstoreError,
)
from obstore.store import LocalStore, MemoryStore, S3Store

from ..errors import CorruptObjectError, InvalidArgumentError, LeveledError, ObjectStoreError
from ..options import ObjectStoreOptions, Options, redact
from .names import file_kind
from .outcomes import (
    AttemptError,
    Created,
    Failure,
    Latencies,
    RetryPolicy,
    Unsettled,
    hedged,
    retry,
    settle_create,
)
from .sync import with_sync_twins

#: Requests that are hedged (see :func:`~.outcomes.hedged`): reads of a known, small size, and
#: creates of at most this many bytes (a copy of a larger upload would cost bandwidth).
HEDGE_MAX_BYTES = 1 << 20
#: A request is never hedged sooner than this.
HEDGE_FLOOR_S = 0.05

_SAFE_PATH = re.compile(r"^[A-Za-z0-9_\-.]+(/[A-Za-z0-9_\-.]+)*$")


class NotFound(ObjectStoreError):
    """An object that should exist does not."""

    def __init__(self, path: str):
        super().__init__(f"object {path!r} does not exist", definite=True, path=path)

    def __reduce__(self):
        return (NotFound, (self.path,))


@dataclass(frozen=True)
class ObjectMeta:
    path: str
    size: int
    last_modified: float  # unix seconds


def _safe(path: str) -> bool:
    return (isinstance(path, str) and bool(_SAFE_PATH.match(path))
            and not any(part in (".", "..") for part in path.split("/")))


def check_path(path: str) -> str:
    """Reject object names that could leave the store's root (``..``, absolute, empty parts)."""
    if not _safe(path):
        raise InvalidArgumentError(f"invalid object path {path!r}")
    return path


def _meta(raw: dict) -> ObjectMeta:
    lm = raw["last_modified"]
    ts = lm.timestamp() if isinstance(lm, _dt.datetime) else float(lm)
    return ObjectMeta(raw["path"], int(raw["size"]), ts)


_STATUS = re.compile(r"status code: (\d{3})")
#: Client errors that a later attempt can still get past (timeout, conflict, throttling).
_RETRIABLE_4XX = {408, 409, 429}


def classify(exc: BaseException, *, atomic: bool = False) -> Failure:
    """What a failed request means. ``atomic`` backends (a local directory, memory) apply a
    write whole or not at all before they answer, so their failures are never in doubt."""
    if _is_short_read(exc):
        return Failure.SHORT
    if isinstance(exc, (NotFoundError, FileNotFoundError)):
        return Failure.MISSING
    if isinstance(exc, (AlreadyExistsError, PreconditionError, FileExistsError)):
        return Failure.EXISTS
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError, PermissionError)):
        return Failure.DENIED
    if isinstance(exc, ConnectionRefusedError):
        return Failure.NOT_SENT
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return Failure.UNKNOWN
    if isinstance(exc, RuntimeError) and not isinstance(exc, ObstoreError):
        return Failure.REJECTED  # the memory store's own refusal
    text = str(exc)
    if "kind: Connect," in text or "tcp connect error" in text:
        return Failure.NOT_SENT  # no connection: not a byte of the request was sent
    found = _STATUS.search(text)
    status = int(found.group(1)) if found else 0
    if 400 <= status < 500 and status not in _RETRIABLE_4XX:
        return Failure.REJECTED
    return Failure.NOT_SENT if atomic else Failure.UNKNOWN


class ShortRead(Exception):
    """obstore's ``get_ranges`` panicked: it does so when a range starts past the end of
    the bytes it got (a Rust panic, a ``BaseException`` here, or an "unknown error")."""


async def _ranges_or_short(read):
    try:
        return await read()
    except BaseException as exc:
        if type(exc).__name__ == "PanicException" or "panicked" in str(exc):
            raise ShortRead(str(exc).split("\n", 1)[0]) from None
        raise


def _is_short_read(exc: BaseException) -> bool:
    """A ranged read past the object's end: obstore's invalid range (HTTP 416 on S3), or
    :class:`ShortRead`."""
    if isinstance(exc, ShortRead):
        return True
    text = str(exc)
    return ("Requested range was invalid" in text or "Invalid range" in text
            or "InvalidRange" in text
            or "status code: 416" in text)


def _store_error(failure: Failure, cause: BaseException | None, op: str, path: str | None,
                 *, maybe_applied: bool = False) -> LeveledError:
    """The typed error for a request that failed for good."""
    if failure is Failure.MISSING:
        return NotFound(path or "")
    if failure is Failure.SHORT:
        return CorruptObjectError(path or "", 0, f"shorter than the range {op} asked for "
                                  f"(truncated): {_short(cause)}")
    if failure is Failure.DENIED:
        return ObjectStoreError(f"{op} {path!r}: access denied: {_short(cause)}", definite=True,
                                path=path)
    return ObjectStoreError(f"{op} {path!r} failed: {_short(cause)}",
                            definite=not maybe_applied, path=path)


def _short(cause: BaseException | None) -> str:
    """The first line of a client error (obstore appends a long debug dump)."""
    return str(cause).split("\n", 1)[0] if cause is not None else "no answer"


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


class _Backend:
    """One attempt of each request, over one obstore store object. A backend is wrapped, not
    changed, by a fault-injecting store, so every retry rule above it is exercised."""

    atomic = False

    def __init__(self, inner):
        self.inner = inner

    async def get(self, path):
        res = await obstore.get_async(self.inner, path)
        return bytes(await res.bytes_async())

    async def get_range(self, path, start, end):
        return bytes(await obstore.get_range_async(self.inner, path, start=start, end=end))

    async def get_ranges(self, path, starts, ends):
        return await obstore.get_ranges_async(self.inner, path, starts=starts, ends=ends)

    async def put(self, path, data, create):
        await obstore.put_async(self.inner, path, data, mode="create" if create else "overwrite",
                                use_multipart=False)

    async def list(self, prefix, offset):
        out = []
        async for chunk in obstore.list(self.inner, prefix, offset=offset):
            out.extend(_meta(o) for o in chunk)
        return out

    async def head(self, path):
        return _meta(await obstore.head_async(self.inner, path))

    async def delete(self, path):
        await obstore.delete_async(self.inner, path)


class _LocalBackend(_Backend):
    """A local directory or in-process memory. The sync calls are faster than the async ones
    (141 us against 436 us for a small ranged read, which waits for a cross-thread wake-up)
    and short enough to run on the event loop. A local write is staged and moved into place,
    so a failed one was not applied."""

    atomic = True

    async def get(self, path):
        return bytes(obstore.get(self.inner, path).bytes())

    async def get_range(self, path, start, end):
        return bytes(obstore.get_range(self.inner, path, start=start, end=end))

    async def get_ranges(self, path, starts, ends):
        return obstore.get_ranges(self.inner, path, starts=starts, ends=ends)

    async def put(self, path, data, create):
        obstore.put(self.inner, path, data, mode="create" if create else "overwrite",
                    use_multipart=False)

    async def list(self, prefix, offset):
        return [_meta(o) for chunk in obstore.list(self.inner, prefix, offset=offset)
                for o in chunk]

    async def head(self, path):
        return _meta(obstore.head(self.inner, path))

    async def delete(self, path):
        obstore.delete(self.inner, path)


# --- memory:// stores ---------------------------------------------------------------------------

_local_memory: dict[str, MemoryStore] = {}
_local_memory_lock = threading.Lock()
#: The one Ray actor (per cluster) that holds every ``memory://`` store's objects.
MEMORY_ACTOR = "leveled-memory"


def _local_memory_store(name: str) -> MemoryStore:
    with _local_memory_lock:
        return _local_memory.setdefault(name, MemoryStore())


class _MemoryServer:
    """Holds the ``memory://`` stores (an obstore MemoryStore each, by name) inside one Ray
    actor, so all processes share them; one actor serves them all, so a new memory store
    costs no new process."""

    def __init__(self):
        self.backends: dict[str, _LocalBackend] = {}

    def drop(self, name: str) -> None:
        self.backends.pop(name, None)

    async def call(self, name: str, method: str, *args):
        backend = self.backends.get(name)
        if backend is None:
            backend = self.backends[name] = _LocalBackend(MemoryStore())
        # obstore's exceptions do not pickle: send back what kind of failure it was.
        try:
            if method == "get_ranges":  # its panic is a BaseException: caught as a short read
                return ("ok", await _ranges_or_short(lambda: backend.get_ranges(*args)))
            return ("ok", await getattr(backend, method)(*args))
        except Exception as exc:
            failure = classify(exc, atomic=True)
            if failure is Failure.SHORT:
                return (failure.value, str(exc))
            if failure in (Failure.EXISTS, Failure.MISSING):
                return (failure.value, None)
            return ("err", f"{type(exc).__name__}: {exc}")


class _RayMemoryBackend:
    """The same calls as :class:`_Backend`, forwarded to a named ``_MemoryServer`` actor."""

    atomic = True

    def __init__(self, name: str):
        self.name = name
        self.actor = _memory_actor()

    async def _call(self, method, *args):
        status, value = await self.actor.call.remote(self.name, method, *args)
        if status == "ok":
            return value
        if status == Failure.EXISTS.value:
            raise FileExistsError()
        if status == Failure.MISSING.value:
            raise FileNotFoundError()
        if status == Failure.SHORT.value:
            raise ShortRead(value)
        raise RuntimeError(value)

    def __getattr__(self, method):
        return lambda *a: self._call(method, *a)


def _memory_actor():
    import ray

    return ray.remote(_MemoryServer).options(
        name=MEMORY_ACTOR, namespace="leveled", lifetime="detached", get_if_exists=True,
        num_cpus=0, max_concurrency=1000).remote()


def drop_memory_store(name: str) -> None:
    """Forget a ``memory://`` store (in the shared Ray actor too, when Ray is running)."""
    with _local_memory_lock:
        _local_memory.pop(name, None)
    import ray

    if ray.is_initialized():
        ray.get(_memory_actor().drop.remote(name))


# --- the store ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreConfig:
    """Where a store lives (its URL), and how its client connects and how its requests are
    timed out, retried and resolved (:class:`ObjectStoreOptions`, whose ``repr`` hides
    credentials)."""

    url: str
    settings: ObjectStoreOptions = field(default_factory=ObjectStoreOptions)

    @classmethod
    def from_options(cls, url: str, options: Options | None = None) -> StoreConfig:
        return cls(url, (options or Options()).object_store)

    @property
    def s3(self) -> dict:
        """obstore's S3 settings: only those set (the rest come from ``AWS_*``)."""
        o = self.settings
        s3 = {"endpoint": o.s3_endpoint, "region": o.s3_region,
              "access_key_id": o.s3_access_key_id, "secret_access_key": o.s3_secret_access_key,
              "session_token": o.s3_session_token, "allow_http": o.s3_allow_http}
        return {k: v for k, v in s3.items() if v is not None}

    @property
    def retry(self) -> RetryPolicy:
        o = self.settings
        return RetryPolicy(o.max_retries, o.retry_timeout_s, o.retry_backoff_s,
                           o.retry_max_backoff_s)


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


def parse_url(url: str) -> tuple[str, str, str]:
    """``(scheme, location, prefix)`` of a store URL, or :class:`InvalidArgumentError`."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"store URL must be a str, not {type(url).__name__}")
    if any(c < " " or c == "\x7f" for c in url):  # a NUL ends a path at the OS's edge
        raise InvalidArgumentError(f"a store URL holds no control character (NUL, newline, "
                                   f"...): {url!r}")
    try:
        parsed = urlparse(url)
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid store URL {url!r}: {exc}") from None
    scheme = parsed.scheme
    if parsed.query or parsed.fragment or parsed.params:
        raise InvalidArgumentError(f"a store URL has no query or fragment: {url!r}")
    if scheme == "memory":
        name = (parsed.netloc + parsed.path).strip("/")
        if not name or not _safe(name):
            raise InvalidArgumentError(f"memory URL needs a name, as in memory://name: {url!r}")
        return scheme, name, ""
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"file URL must be file:///absolute/path: {url!r}")
        path = parsed.path
        if not path.startswith("/") or ".." in path.split("/"):
            raise InvalidArgumentError(f"file URL must have an absolute path: {url!r}")
        return scheme, os.path.normpath(path), ""
    if scheme == "s3":
        bucket = parsed.netloc
        if not bucket:
            raise InvalidArgumentError(f"S3 URL needs a bucket, as in s3://bucket/prefix: {url!r}")
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise InvalidArgumentError(f"invalid S3 bucket name {bucket!r} in {url!r}")
        path = parsed.path
        prefix = path[1:-1] if path.endswith("/") else path[1:]
        if prefix and not _safe(prefix):
            raise InvalidArgumentError(f"invalid S3 prefix in {url!r} (empty parts such as "
                                       f"'//', '.' and '..' are not allowed)")
        return scheme, bucket, prefix
    raise InvalidArgumentError(
        f"unsupported store URL {url!r}: use memory://name, file:///path or s3://bucket/prefix"
    )


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
        self.scheme, self.location, self.prefix = parse_url(config.url)
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
        settings = self.config.settings
        client = {"timeout": timedelta(seconds=settings.request_timeout_s),
                  "connect_timeout": timedelta(seconds=settings.connect_timeout_s)}
        if self.scheme == "memory":
            import ray

            if ray.is_initialized():
                return _RayMemoryBackend(self.location)
            return _LocalBackend(_local_memory_store(self.location))
        if self.scheme == "file":
            try:
                os.makedirs(self.location, exist_ok=True)
            except OSError as exc:  # a path that cannot be a directory: the store is unusable
                raise ObjectStoreError(f"cannot use {self.location} as a store: {exc}") from None
            return _LocalBackend(LocalStore(self.location))
        s3 = dict(self.config.s3)
        endpoint = s3.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or ""
        if "allow_http" not in s3 and endpoint.startswith("http://"):
            s3["allow_http"] = True
        if s3.pop("allow_http", False):
            client["allow_http"] = True
        # One HTTP request per attempt: the retries are ours (below), so that each one is
        # counted and a retried create is resolved rather than mistaken for a lost race.
        try:
            return _Backend(S3Store(self.location, prefix=self.prefix or None,
                                    client_options=client, retry_config={"max_retries": 0}, **s3))
        except Exception as exc:  # obstore refuses the configuration itself
            raise InvalidArgumentError(redact(f"cannot set up the S3 client for {self.url}: "
                                              f"{_short(exc)}", self._secrets())) from None

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
            lambda: _ranges_or_short(lambda: self._backend.get_ranges(path, starts, ends)),
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
