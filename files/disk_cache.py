"""The node's cache of file bytes on local disk: the hybrid cache's second tier.

A file clerk looks in its host's memory cache first (:mod:`.lru`), then here, then in the
object store. What a point read fetches (a file's footer, an SST block, the journal blocks that
hold the values asked for) is kept here too, so a Bookie restarted on the same node (Ray's
failover, a reopen) or a reader in another process of the node starts warm. Scans leave it
alone, as they leave the memory cache alone: they read each block once.

The cache is `python-diskcache <https://grantjenks.com/docs/diskcache/>`_: a SQLite index and
one file per larger value, safe for every process of the node at once, bounded in bytes. What
it keeps is immutable (a file's bytes never change under its name), so an entry never goes
stale; it is keyed by the store's id (:attr:`~leveled_ray.manifest.model.Manifest.store_id`,
new for every store made, so a journal slot name used again by a store made later at the
same URL is another key), the file's name and the byte range.

**A bad cache is a miss, never a wrong read and never a failed call.** Each entry holds a
hash of its key and bytes (xxh3): an entry truncated, overwritten or moved to another key is
dropped and read from the object store. Every error of the cache itself (a file deleted under
it, a corrupt index, a full disk, a lock held too long) is counted and taken as a miss; a
cache whose index cannot be read is moved aside and made again. Writes go through one thread
per process and are dropped when it falls behind: a read never waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import shutil
import tempfile
import threading
import time
from collections import Counter

import xxhash

from ..options import Options

#: Where the cache lives when ``disk_cache.path`` is not set.
DEFAULT_PATH = os.path.join(tempfile.gettempdir(), "leveled-ray-cache")
#: Values this big or bigger get a file of their own (smaller ones live in the index).
FILE_BYTES = 8 << 10
#: Bytes of writes waiting for the writer thread; more are dropped.
PENDING_BYTES = 64 << 20
#: After an error, the cache is left alone this long before it is opened again.
REOPEN_AFTER_S = 1.0
#: How long one operation waits for another process's lock on the index.
LOCK_WAIT_S = 0.5
HASH_BYTES = 8


def _sealed(key: str, data: bytes) -> bytes:
    return _digest(key, data) + data


def _digest(key: str, data) -> bytes:
    hasher = xxhash.xxh3_64(key.encode())
    hasher.update(data)
    return hasher.digest()


def _opened(key: str, stored) -> bytes | None:
    """The bytes of an entry, or ``None`` if they are not what was stored under ``key``."""
    if not isinstance(stored, bytes) or len(stored) < HASH_BYTES:
        return None
    data = stored[HASH_BYTES:]
    return data if _digest(key, data) == stored[:HASH_BYTES] else None


class NodeCache:
    """One cache directory, opened once per process (:func:`node_cache`)."""

    def __init__(self, path: str, size: int):
        self.path, self.size = path, size
        self.counters: Counter[str] = Counter()
        self._cache = None
        self._failed_at = 0.0
        self._lock = threading.Lock()
        self._writes: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0  # bytes queued
        self._writer = threading.Thread(target=self._write_loop, name="disk-cache-writer",
                                        daemon=True)
        self._writer.start()

    def _opened_cache(self):
        """The cache, opened (or made again) if needed; ``None`` while it is failing."""
        cache = self._cache
        if cache is not None:
            return cache
        with self._lock:
            if self._cache is None and time.monotonic() - self._failed_at >= REOPEN_AFTER_S:
                try:
                    self._cache = self._open()
                except Exception as exc:  # noqa: BLE001 - any failure of the cache is a miss
                    self._failed(exc)
            return self._cache

    def _open(self):
        import diskcache

        settings = dict(size_limit=self.size, disk_min_file_size=FILE_BYTES,
                        timeout=LOCK_WAIT_S, statistics=False)
        try:
            return diskcache.Cache(self.path, **settings)
        except Exception:  # noqa: BLE001 - an index it cannot read: start a new one
            self.counters["remade"] += 1
            aside = f"{self.path}.bad-{os.getpid()}-{time.monotonic_ns()}"
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            shutil.rmtree(aside, ignore_errors=True)
            return diskcache.Cache(self.path, **settings)

    def _failed(self, exc: BaseException) -> None:
        """An error of the cache: count it, and open the cache again a little later."""
        self.counters["errors"] += 1
        self.counters[f"error {type(exc).__name__}"] += 1
        cache, self._cache = self._cache, None
        self._failed_at = time.monotonic()
        if cache is not None:
            with contextlib.suppress(Exception):
                cache.close()

    def get_many(self, keys: list[str], counted: bool = True,
                 count_misses: bool = True) -> list[bytes | None]:
        """The bytes under each key, ``None`` for a miss (blocking: call it in a thread).
        ``counted=False``: not counted as hits or misses (a note, not a file's bytes);
        ``count_misses=False``: a miss is not counted (a warm start's: no read from the store
        follows it, so no put either)."""
        out: list[bytes | None] = []
        for key in keys:
            data = None
            cache = self._opened_cache()
            if cache is not None:
                try:
                    stored = cache.get(key)
                except Exception as exc:  # noqa: BLE001 - a failing cache is a miss
                    self._failed(exc)
                else:
                    data = _opened(key, stored)
                    if data is None and stored is not None:
                        self.counters["bad"] += 1  # damaged: read from the store again
                        self._write(key, None)
            if counted and (data is not None or count_misses):
                self.counters["hits" if data is not None else "misses"] += 1
            out.append(data)
        return out

    def put(self, key: str, data) -> None:
        """Keep ``data`` under ``key``, in the background (dropped if the writer is behind)."""
        self._write(key, data)

    def _write(self, key: str, data) -> None:
        size = 0 if data is None else len(data)
        if self._pending + size > PENDING_BYTES:
            self.counters["dropped"] += 1
            return
        self._pending += size  # under the GIL: a count off by a write or two does no harm
        self._writes.put((key, data))

    def _write_loop(self) -> None:
        while True:
            key, data = self._writes.get()
            if key is None:  # a flush: the writes before it are done
                data.set()
                continue
            self._pending -= 0 if data is None else len(data)
            cache = self._opened_cache()
            if cache is None:
                continue
            try:
                if data is None:
                    cache.delete(key)
                else:
                    cache.set(key, _sealed(key, bytes(data)))
                    self.counters["puts"] += 1
            except Exception as exc:  # noqa: BLE001 - a failing cache keeps nothing
                self._failed(exc)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until the writes queued so far are done (tests, benchmarks)."""
        done = threading.Event()
        self._writes.put((None, done))
        done.wait(timeout_s)

    def stats(self) -> dict:
        """This process's figures: ``hits``, ``misses``, ``puts``, ``bad`` (entries that
        failed their hash), ``dropped`` writes, ``errors`` (and each error's type), and how
        often the cache was ``remade``; with its ``path`` and byte limit (``size``)."""
        return {"path": self.path, "size": self.size, "hits": 0, "misses": 0, "puts": 0,
                "bad": 0, "errors": 0, **self.counters}


_OPEN: dict[tuple[str, int], NodeCache] = {}
_OPEN_LOCK = threading.Lock()


def node_cache(options: Options, url: str) -> NodeCache | None:
    """This process's handle on the node's disk cache for a store at ``url``, or ``None`` if
    that store is not cached (the cache is off, or the store is in memory or, unless
    ``disk_cache.local_stores``, on local disk)."""
    settings = options.disk_cache
    scheme = url.partition("://")[0]
    if (not settings.size or scheme in ("memory", "")
            or (scheme == "file" and not settings.local_stores)):
        return None
    key = (settings.path or DEFAULT_PATH, settings.size)
    with _OPEN_LOCK:
        cache = _OPEN.get(key)
        if cache is None:
            cache = _OPEN[key] = NodeCache(*key)
        return cache


class DiskTier:
    """The disk cache as one store's file clerks see it: keys of that store's files."""

    def __init__(self, cache: NodeCache, store_id: str):
        self.cache, self.store_id = cache, store_id

    def key(self, name: str, lo: int, hi: int) -> str:
        # a clone reads an ancestor's file as "@<its store id>/<name>": the same bytes
        owner, _, rest = name[1:].partition("/") if name.startswith("@") else (
            self.store_id, "", name)
        return f"{owner}/{rest}@{lo}-{hi}"

    async def get_many(self, name: str, spans: list[tuple[int, int]],
                       count_misses: bool = True) -> list[bytes | None]:
        keys = [self.key(name, lo, hi) for lo, hi in spans]
        return await asyncio.to_thread(self.cache.get_many, keys, True, count_misses)

    def put(self, name: str, lo: int, hi: int, data) -> None:
        self.cache.put(self.key(name, lo, hi), data)

    async def get_note(self, label: str) -> bytes | None:
        """The store's note ``label`` (what a process keeps about the store, not a file's
        bytes: see :mod:`.warm_start`), or ``None``."""
        (data,) = await asyncio.to_thread(self.cache.get_many, [f"{self.store_id}/{label}"],
                                          False)
        return data

    def put_note(self, label: str, data: bytes) -> None:
        self.cache.put(f"{self.store_id}/{label}", data)
