"""Where a store lives and how its client behaves: the store URL, checked and parsed, object
paths that cannot leave the store's root, and the client's connection, timeout and retry
settings."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlparse

from ..errors import InvalidArgumentError
from ..options import ObjectStoreOptions, Options
from .outcomes import RetryPolicy

_SAFE_PATH = re.compile(r"^[A-Za-z0-9_\-.]+(/[A-Za-z0-9_\-.]+)*$")



def safe_path(path: str) -> bool:
    """Whether ``path`` is a relative object path of safe characters, with no empty, ``.``
    or ``..`` part."""
    return (isinstance(path, str) and bool(_SAFE_PATH.match(path))
            and not any(part in (".", "..") for part in path.split("/")))


def check_path(path: str) -> str:
    """Reject object names that could leave the store's root (``..``, absolute, empty parts)."""
    if not safe_path(path):
        raise InvalidArgumentError(f"invalid object path {path!r}")
    return path



@dataclass(frozen=True)
class StoreConfig:
    """Where a store lives (its URL, checked and parsed once, when the config is made: it
    travels to the Bookie and to every task parsed), and how its client connects and how its
    requests are timed out, retried and resolved (:class:`ObjectStoreOptions`, whose
    ``repr`` hides credentials). Bad URLs raise :class:`InvalidArgumentError`."""

    url: str
    settings: ObjectStoreOptions = field(default_factory=ObjectStoreOptions)
    scheme: str = field(init=False, compare=False)
    location: str = field(init=False, compare=False)
    prefix: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        scheme, location, prefix = parse_url(self.url)
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "location", location)
        object.__setattr__(self, "prefix", prefix)

    @classmethod
    def from_options(cls, url: str, options: Options | None = None) -> StoreConfig:
        return cls(url, (options or Options()).object_store)

    def under(self, path: str) -> StoreConfig:
        """The config of the store at ``path`` below this one (a shard's)."""
        return StoreConfig(f"{self.url.rstrip('/')}/{check_path(path)}", self.settings)

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


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs name the same location, however spelled (a trailing slash,
    ``.`` parts or doubled slashes in a file path); both must be valid store URLs."""
    return parse_url(a) == parse_url(b)


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
        if not name or not safe_path(name):
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
        if prefix and not safe_path(prefix):
            raise InvalidArgumentError(f"invalid S3 prefix in {url!r} (empty parts such as "
                                       f"'//', '.' and '..' are not allowed)")
        return scheme, bucket, prefix
    raise InvalidArgumentError(
        f"unsupported store URL {url!r}: use memory://name, file:///path or s3://bucket/prefix"
    )
