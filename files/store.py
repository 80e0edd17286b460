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
from dataclasses import dataclass, field
from urllib.parse import urlparse

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import LocalStore, MemoryStore, S3Store

from ..errors import InvalidArgumentError, ObjectStoreError
from ..options import Options

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


def _is_missing(exc: BaseException) -> bool:
    return isinstance(exc, (NotFoundError, FileNotFoundError))


def _store_error(exc: BaseException, op: str, path: str | None, *, write: bool):
    """Map an obstore failure to :class:`ObjectStoreError` with persist's definite flag."""
    if _is_missing(exc):
        return NotFound(path or "")
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
        return ObjectStoreError(f"{op} {path!r}: access denied: {exc}", definite=True, path=path)
    # A failed read changed nothing; a failed write may have reached the store.
    return ObjectStoreError(f"{op} {path!r} failed: {exc}", definite=not write, path=path)


@dataclass
class IoStats:
    """Requests and bytes this process sent to the object store."""

    puts: int = 0
    put_bytes: int = 0
    gets: int = 0
    get_bytes: int = 0
    lists: int = 0
    deletes: int = 0
    heads: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class _Backend:
    """The calls the store makes, over one obstore store object (sync and async)."""

    def __init__(self, inner):
        self.inner = inner

    def get(self, path):
        return bytes(obstore.get(self.inner, path).bytes())

    async def get_async(self, path):
        res = await obstore.get_async(self.inner, path)
        return bytes(await res.bytes_async())

    def get_range(self, path, start, end):
        return bytes(obstore.get_range(self.inner, path, start=start, end=end))

    async def get_range_async(self, path, start, end):
        return bytes(await obstore.get_range_async(self.inner, path, start=start, end=end))

    def put(self, path, data, create):
        obstore.put(self.inner, path, data, mode="create" if create else "overwrite",
                    use_multipart=False)

    async def put_async(self, path, data, create):
        await obstore.put_async(self.inner, path, data, mode="create" if create else "overwrite",
                                use_multipart=False)

    def get_ranges(self, path, starts, ends):
        return [bytes(b) for b in obstore.get_ranges(self.inner, path, starts=starts, ends=ends)]

    async def get_ranges_async(self, path, starts, ends):
        got = await obstore.get_ranges_async(self.inner, path, starts=starts, ends=ends)
        return [bytes(b) for b in got]

    def list(self, prefix, offset):
        return [_meta(o) for chunk in obstore.list(self.inner, prefix, offset=offset)
                for o in chunk]

    async def list_async(self, prefix, offset):
        out = []
        async for chunk in obstore.list(self.inner, prefix, offset=offset):
            out.extend(_meta(o) for o in chunk)
        return out

    def head(self, path):
        return _meta(obstore.head(self.inner, path))

    async def head_async(self, path):
        return _meta(await obstore.head_async(self.inner, path))

    def delete(self, path):
        obstore.delete(self.inner, path)

    async def delete_async(self, path):
        await obstore.delete_async(self.inner, path)


class _LocalBackend(_Backend):
    """A local directory or in-process memory: the sync call is faster than the async one
    (141 us against 436 us for a small ranged read, which waits for a cross-thread wake-up),
    and short enough to run on the event loop."""

    async def get_async(self, path):
        return self.get(path)

    async def get_range_async(self, path, start, end):
        return self.get_range(path, start, end)

    async def put_async(self, path, data, create):
        self.put(path, data, create)

    async def list_async(self, prefix, offset):
        return self.list(prefix, offset)

    async def get_ranges_async(self, path, starts, ends):
        return self.get_ranges(path, starts, ends)

    async def head_async(self, path):
        return self.head(path)

    async def delete_async(self, path):
        self.delete(path)


# --- memory:// stores ---------------------------------------------------------------------------

_local_memory: dict[str, MemoryStore] = {}
_local_memory_lock = threading.Lock()
MEMORY_ACTOR_PREFIX = "leveled-memory:"


def _local_memory_store(name: str) -> MemoryStore:
    with _local_memory_lock:
        return _local_memory.setdefault(name, MemoryStore())


class _MemoryServer:
    """Holds one obstore MemoryStore inside a Ray actor, so all processes share it."""

    def __init__(self):
        self.backend = _Backend(MemoryStore())

    def call(self, method: str, *args):
        # obstore's exceptions do not pickle: send back what kind of failure it was.
        try:
            return ("ok", getattr(self.backend, method)(*args))
        except (AlreadyExistsError, PreconditionError):
            return ("exists", None)
        except Exception as exc:
            if _is_missing(exc):
                return ("missing", None)
            return ("err", f"{type(exc).__name__}: {exc}")


class _RayMemoryBackend:
    """The same calls as :class:`_Backend`, forwarded to a named ``_MemoryServer`` actor."""

    def __init__(self, name: str):
        import ray

        actor_name = MEMORY_ACTOR_PREFIX + name
        self.actor = ray.remote(_MemoryServer).options(
            name=actor_name, namespace="leveled", lifetime="detached", get_if_exists=True,
            num_cpus=0,
        ).remote()

    @staticmethod
    def _result(reply):
        status, value = reply
        if status == "ok":
            return value
        if status == "exists":
            raise FileExistsError()
        if status == "missing":
            raise FileNotFoundError()
        raise RuntimeError(value)

    def _sync(self, method, *args):
        import ray

        return self._result(ray.get(self.actor.call.remote(method, *args)))

    async def _async(self, method, *args):
        return self._result(await self.actor.call.remote(method, *args))

    def __getattr__(self, method):
        if method.endswith("_async"):
            base = method[: -len("_async")]
            return lambda *a: self._async(base, *a)
        return lambda *a: self._sync(method, *a)


def drop_memory_store(name: str) -> None:
    """Forget a ``memory://`` store (its Ray actor too, when Ray is running)."""
    with _local_memory_lock:
        _local_memory.pop(name, None)
    import ray

    if ray.is_initialized():
        try:
            ray.kill(ray.get_actor(MEMORY_ACTOR_PREFIX + name, namespace="leveled"))
        except ValueError:
            pass


# --- the store ----------------------------------------------------------------------------------


@dataclass
class StoreConfig:
    """Where a store lives: its URL plus the S3 settings from :class:`Options`."""

    url: str
    s3: dict = field(default_factory=dict)
    timeout_s: float = 30.0

    @classmethod
    def from_options(cls, url: str, options: Options | None = None) -> StoreConfig:
        options = options or Options()
        s3 = {
            "endpoint": options.s3_endpoint,
            "region": options.s3_region,
            "access_key_id": options.s3_access_key_id,
            "secret_access_key": options.s3_secret_access_key,
            "session_token": options.s3_session_token,
        }
        s3 = {k: v for k, v in s3.items() if v is not None}
        if options.s3_allow_http is not None:
            s3["allow_http"] = options.s3_allow_http
        return cls(url, s3, options.request_timeout_s)


def parse_url(url: str) -> tuple[str, str, str]:
    """``(scheme, location, prefix)`` of a store URL, or :class:`InvalidArgumentError`."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"store URL must be a str, not {type(url).__name__}")
    parsed = urlparse(url)
    scheme = parsed.scheme
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
        prefix = parsed.path.strip("/")
        if not bucket:
            raise InvalidArgumentError(f"S3 URL needs a bucket, as in s3://bucket/prefix: {url!r}")
        if prefix and not _safe(prefix):
            raise InvalidArgumentError(f"invalid S3 prefix in {url!r}")
        return scheme, bucket, prefix
    raise InvalidArgumentError(
        f"unsupported store URL {url!r}: use memory://name, file:///path or s3://bucket/prefix"
    )


class ObjectStore:
    """get, ranged get, put, put-if-absent, list, head and delete under one store root.

    Every call has a sync form and an ``*_async`` form. Failures raise :class:`ObjectStoreError`
    (``definite`` says whether a write may have happened); a missing object raises
    :class:`NotFound` from ``get``/``get_range`` and gives ``None`` from ``head``.
    The object pickles as its configuration, so it can be handed to Ray actors and tasks.
    """

    def __init__(self, config: StoreConfig):
        self.config = config
        self.scheme, self.location, self.prefix = parse_url(config.url)
        self.stats = IoStats()
        self._backend = self._make_backend()

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

    def _make_backend(self):
        client = {"timeout": f"{max(1, int(self.config.timeout_s))}s"}
        if self.scheme == "memory":
            import ray

            if ray.is_initialized():
                return _RayMemoryBackend(self.location)
            return _LocalBackend(_local_memory_store(self.location))
        if self.scheme == "file":
            os.makedirs(self.location, exist_ok=True)
            return _LocalBackend(LocalStore(self.location))
        s3 = dict(self.config.s3)
        endpoint = s3.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or ""
        if "allow_http" not in s3 and endpoint.startswith("http://"):
            s3["allow_http"] = True
        if s3.pop("allow_http", False):
            client["allow_http"] = True
        return _Backend(S3Store(self.location, prefix=self.prefix or None, client_options=client,
                                **s3))

    # -- reads --

    def get(self, path: str) -> bytes:
        check_path(path)
        try:
            data = self._backend.get(path)
        except Exception as exc:
            raise _store_error(exc, "get", path, write=False) from None
        self._count_get(len(data))
        return data

    async def get_async(self, path: str) -> bytes:
        check_path(path)
        try:
            data = await self._backend.get_async(path)
        except Exception as exc:
            raise _store_error(exc, "get", path, write=False) from None
        self._count_get(len(data))
        return data

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object (fewer if the object is shorter)."""
        check_path(path)
        try:
            data = self._backend.get_range(path, start, end)
        except Exception as exc:
            raise _store_error(exc, "get_range", path, write=False) from None
        self._count_get(len(data))
        return data

    async def get_range_async(self, path: str, start: int, end: int) -> bytes:
        check_path(path)
        try:
            data = await self._backend.get_range_async(path, start, end)
        except Exception as exc:
            raise _store_error(exc, "get_range", path, write=False) from None
        self._count_get(len(data))
        return data

    def get_ranges(self, path: str, starts: list[int], ends: list[int]) -> list[bytes]:
        """Several byte ranges of one object in one request (nearby ranges are coalesced)."""
        check_path(path)
        try:
            parts = self._backend.get_ranges(path, starts, ends)
        except Exception as exc:
            raise _store_error(exc, "get_ranges", path, write=False) from None
        self._count_get(sum(map(len, parts)))
        return parts

    async def get_ranges_async(self, path: str, starts: list[int], ends: list[int]) -> list[bytes]:
        check_path(path)
        try:
            parts = await self._backend.get_ranges_async(path, starts, ends)
        except Exception as exc:
            raise _store_error(exc, "get_ranges", path, write=False) from None
        self._count_get(sum(map(len, parts)))
        return parts

    def head(self, path: str) -> ObjectMeta | None:
        check_path(path)
        self.stats.heads += 1
        try:
            return self._backend.head(path)
        except Exception as exc:
            if _is_missing(exc):
                return None
            raise _store_error(exc, "head", path, write=False) from None

    async def head_async(self, path: str) -> ObjectMeta | None:
        check_path(path)
        self.stats.heads += 1
        try:
            return await self._backend.head_async(path)
        except Exception as exc:
            if _is_missing(exc):
                return None
            raise _store_error(exc, "head", path, write=False) from None

    def list(self, prefix: str, offset: str | None = None) -> list[ObjectMeta]:
        """Objects whose path starts with ``prefix`` (after ``offset`` if given), in path order."""
        check_path(prefix.rstrip("/"))
        self.stats.lists += 1
        try:
            items = self._backend.list(prefix, offset)
        except Exception as exc:
            raise _store_error(exc, "list", prefix, write=False) from None
        return sorted(items, key=lambda m: m.path)

    async def list_async(self, prefix: str, offset: str | None = None) -> list[ObjectMeta]:
        check_path(prefix.rstrip("/"))
        self.stats.lists += 1
        try:
            items = await self._backend.list_async(prefix, offset)
        except Exception as exc:
            raise _store_error(exc, "list", prefix, write=False) from None
        return sorted(items, key=lambda m: m.path)

    # -- writes --

    def put(self, path: str, data: bytes) -> None:
        """Write an object, replacing any object of that name (used only by backup copies)."""
        check_path(path)
        self._count_put(len(data))
        try:
            self._backend.put(path, data, False)
        except Exception as exc:
            raise _store_error(exc, "put", path, write=True) from None

    async def put_async(self, path: str, data: bytes) -> None:
        check_path(path)
        self._count_put(len(data))
        try:
            await self._backend.put_async(path, data, False)
        except Exception as exc:
            raise _store_error(exc, "put", path, write=True) from None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create an object; ``False`` (and no change) if one of that name exists already."""
        check_path(path)
        self._count_put(len(data))
        try:
            self._backend.put(path, data, True)
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        except Exception as exc:
            raise _store_error(exc, "put_if_absent", path, write=True) from None
        return True

    async def put_if_absent_async(self, path: str, data: bytes) -> bool:
        check_path(path)
        self._count_put(len(data))
        try:
            await self._backend.put_async(path, data, True)
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        except Exception as exc:
            raise _store_error(exc, "put_if_absent", path, write=True) from None
        return True

    def delete(self, path: str) -> None:
        """Delete an object; deleting a missing object is not an error."""
        check_path(path)
        self.stats.deletes += 1
        try:
            self._backend.delete(path)
        except Exception as exc:
            if not _is_missing(exc):
                raise _store_error(exc, "delete", path, write=True) from None

    async def delete_async(self, path: str) -> None:
        check_path(path)
        self.stats.deletes += 1
        try:
            await self._backend.delete_async(path)
        except Exception as exc:
            if not _is_missing(exc):
                raise _store_error(exc, "delete", path, write=True) from None

    def _count_get(self, n: int) -> None:
        self.stats.gets += 1
        self.stats.get_bytes += n

    def _count_put(self, n: int) -> None:
        self.stats.puts += 1
        self.stats.put_bytes += n

