"""Options: every setting of a store, as a few nested frozen groups.

``lr.open(url, options=lr.Options(...))``. The top level holds what every part of a store
shares (codec, cache, size limits); the groups hold the object store's client
(:class:`ObjectStoreOptions`), the Ledger (:class:`LedgerOptions`), the Journal
(:class:`JournalOptions`), garbage collection (:class:`GcOptions`) and the node's disk cache
(:class:`DiskCacheOptions`). A group is given as its
dataclass or as a dict of its fields: ``lr.Options(gc={"min_age_s": 60})``. As text (the CLI's
``--option``, Spark options) a group's field is named with a dot: ``gc.min_age_s=60``.

Each field has a default that suits a single machine; the S3 fields fall back to the usual
``AWS_*`` environment variables when left ``None``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InvalidArgumentError

KIB = 1024
MIB = 1024 * KIB

#: The codecs of SST blocks and journal entries, by name, each with the id that every block
#: and entry records (a file-format constant: never renumber).
CODECS = {"none": 0, "lz4": 1, "zstd": 2}
#: What journal compaction keeps of replaced objects: their key changes (``retain``), or not.
RETAIN, RECOVR = "retain", "recovr"
RECOVERY_STRATEGIES = (RETAIN, RECOVR)
#: Object-store fields that hold credentials: never shown by ``repr``, ``stats()``, the CLI or
#: logs.
SECRET_FIELDS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token")
HIDDEN = "***"


def redact(text: str, secrets) -> str:
    """``text`` with every one of ``secrets`` (non-empty strings) replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    return text


def check_positive_int(name: str, value) -> int:
    """``value``, refused unless it is an int (not a bool) above zero."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive int, not {value!r}")
    return value


def check_number(name: str, value, *, minimum: float, inclusive: bool = True) -> float:
    """``value``, refused unless it is a finite int or float (not a bool) at or above
    ``minimum`` (above it when not ``inclusive``): ``inf`` and ``NaN`` are refused."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (value >= minimum if inclusive else value > minimum))
    if not ok:
        bound = ">=" if inclusive else ">"
        raise InvalidArgumentError(f"{name} must be a number {bound} {minimum:g} (finite), "
                                   f"not {value!r}")
    return value


def value_from_text(name: str, kind: str, text):
    """``text`` as a value of type ``kind`` (``"bool"``, ``"int"``, ``"float"``, ``"str"``, or
    a field's annotation, as a string); ``name`` is for the error message."""
    text = str(text).strip()
    if "bool" in kind:
        if text.lower() not in ("true", "false"):
            raise InvalidArgumentError(f"option {name} must be true or false, not {text!r}")
        return text.lower() == "true"
    if kind.startswith(("int", "float")):
        try:
            number = int(text) if kind.startswith("int") else float(text)
        except ValueError:
            raise InvalidArgumentError(f"option {name} must be a number, not {text!r}") from None
        if not math.isfinite(number):
            raise InvalidArgumentError(f"option {name} must be a finite number, not {text!r}")
        return number
    if "None" in kind and text.lower() in ("", "none", "null"):
        return None
    return text


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Group:
    """Validation, ``replace`` and text names shared by :class:`Options` and its groups. A
    group lists its fields by the rule each must meet; ``__post_init__`` checks them all."""

    _positive_ints: tuple[str, ...] = ()
    _counts: tuple[str, ...] = ()  # ints >= 0
    _durations: tuple[str, ...] = ()  # numbers >= 0
    _positive_durations: tuple[str, ...] = ()  # numbers > 0
    _optional_strs: tuple[str, ...] = ()
    _choices: Mapping[str, tuple] = {}
    _group = ""  # the group's field name in Options ("" for Options itself)

    def __post_init__(self) -> None:
        named = self._named
        for name in self._positive_ints:
            check_positive_int(named(name), getattr(self, name))
        for name in self._counts:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise InvalidArgumentError(f"{named(name)} must be an int >= 0, not {value!r}")
        for name in self._durations:
            check_number(named(name), getattr(self, name), minimum=0.0)
        for name in self._positive_durations:
            check_number(named(name), getattr(self, name), minimum=0.0, inclusive=False)
        for name in self._optional_strs:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(f"{named(name)} must be a str or None, not {value!r}")
        for name, allowed in self._choices.items():
            if getattr(self, name) not in allowed:
                raise InvalidArgumentError(
                    f"{named(name)} must be one of {allowed}, not {getattr(self, name)!r}")
        self._check()

    @classmethod
    def _named(cls, name: str) -> str:
        """A field's name as text and in messages: ``gc.min_age_s`` for a group's field."""
        return f"{cls._group}.{name}" if cls._group else name

    def _check(self) -> None:
        """Rules that tie fields together (a group adds its own)."""

    @classmethod
    def _build(cls, values: Mapping):
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise InvalidArgumentError(f"unknown option(s) {sorted(map(cls._named, unknown))}")
        return cls(**values)

    def replace(self, **changes):
        """A copy with some fields changed (validated like a new one)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidArgumentError(f"unknown option(s) {sorted(map(self._named, unknown))}")
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ObjectStoreOptions(_Group):
    """How the store's object-store client connects, times out, retries and resolves."""

    _group = "object_store"

    #: S3 endpoint URL (for S3-compatible stores); ``None`` uses ``AWS_ENDPOINT_URL`` or AWS.
    s3_endpoint: str | None = None
    #: S3 region; ``None`` uses ``AWS_REGION`` / ``AWS_DEFAULT_REGION``.
    s3_region: str | None = None
    #: S3 credentials; ``None`` uses ``AWS_ACCESS_KEY_ID`` and friends.
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    s3_session_token: str | None = None
    #: Allow plain-HTTP endpoints (local S3-compatible servers); ``None`` allows it when the
    #: endpoint starts with ``http://``.
    s3_allow_http: bool | None = None
    #: Timeout of one object-store request, in seconds (one attempt: a request that takes
    #: longer is abandoned and retried).
    request_timeout_s: float = 30.0
    #: Timeout for opening a connection to the object store, in seconds.
    connect_timeout_s: float = 5.0
    #: Retries of one object-store request after a transient failure (a 5xx, a timeout, a
    #: reset or refused connection) ...
    max_retries: int = 10
    #: ... within this many seconds from its first attempt; then the request fails with a typed
    #: :class:`~leveled_ray.ObjectStoreError`. Reads never close anything when they fail.
    retry_timeout_s: float = 30.0
    #: Backoff between retries: full jitter over an exponential ramp from this ...
    retry_backoff_s: float = 0.05
    #: ... up to this.
    retry_max_backoff_s: float = 2.0
    #: A create whose outcome is unknown (a lost reply, a timeout) is resent, and its object
    #: read back, for up to this many seconds until it is known. If it is still unknown then,
    #: the name is sealed (an empty object of the writer's own) for up to as long again, so the
    #: write can never land later and the caller gets a definite error.
    write_resolve_s: float = 30.0
    #: Send a second copy of a small network request (a read of a known range, a create of
    #: up to 1 MiB) that has not answered within twice the recent 95th-percentile latency
    #: (at least 50 ms, at most half of ``request_timeout_s``); the first answer wins.
    #: Creates resolve their own outcome, so a copy is never applied twice.
    hedge_requests: bool = True

    _counts = ("max_retries",)
    _durations = ("retry_backoff_s",)
    _positive_durations = ("request_timeout_s", "connect_timeout_s", "retry_timeout_s",
                           "retry_max_backoff_s", "write_resolve_s")
    _optional_strs = ("s3_endpoint", "s3_region") + SECRET_FIELDS

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return repr(HIDDEN) if name in SECRET_FIELDS and value else repr(value)

        fields = ", ".join(f"{f.name}={shown(f.name)}" for f in dataclasses.fields(self))
        return f"ObjectStoreOptions({fields})"

    def _check(self) -> None:
        if not isinstance(self.hedge_requests, bool):
            raise InvalidArgumentError(
                f"object_store.hedge_requests must be a bool, not {self.hedge_requests!r}")
        if self.s3_allow_http is not None and not isinstance(self.s3_allow_http, bool):
            raise InvalidArgumentError(
                f"object_store.s3_allow_http must be a bool or None, not {self.s3_allow_http!r}")
        if self.retry_backoff_s > self.retry_max_backoff_s:
            raise InvalidArgumentError("object_store.retry_backoff_s must not exceed "
                                       "object_store.retry_max_backoff_s")

    def secrets(self) -> list[str]:
        """The credentials set here (to scrub from any text shown)."""
        return [v for v in (getattr(self, name) for name in SECRET_FIELDS) if v]


@dataclass(frozen=True)
class LedgerOptions(_Group):
    """How the Ledger takes changes in, persists them, and shapes its SSTs."""

    _group = "ledger"

    #: The Bookie pushes its recent Ledger changes to the Penciller once it holds this many ...
    push_keys: int = 4000
    #: ... or once the oldest unpushed change is this old.
    push_ms: float = 50.0
    #: The Penciller writes its L0 memory to an L0 SST file once it holds this many keys ...
    l0_max_keys: int = 32_000
    #: ... or once its oldest change is this many seconds old, so that a quiet store persists
    #: its Ledger too: journal compaction can then reclaim what was replaced or deleted, and a
    #: restart replays little.
    l0_max_age_s: float = 60.0
    #: Most L0 files waiting for a merge; beyond it the Penciller keeps changes in L0 memory.
    max_l0_files: int = 4
    #: Backpressure: changes acknowledged but not yet in an SST (the Bookie holds them). Past
    #: half of this, each write is delayed, in proportion, by up to ``max_write_delay_ms``; at
    #: the limit, writes wait until merges catch up, so memory stays bounded.
    max_unpersisted_keys: int = 400_000
    #: The longest delay backpressure adds to one write below the hard limit.
    max_write_delay_ms: float = 200.0
    #: Most entries in one SST written by a merge (levels 1 and below).
    sst_max_keys: int = 65_536
    #: Target uncompressed size of one SST block (one ranged GET on a point lookup).
    sst_block_bytes: int = 32 * KIB
    #: Bloom filter bits per key in SSTs (10 gives about 1% false positives).
    bloom_bits_per_key: int = 10
    #: The tictac tree the Penciller keeps as writes land (:mod:`leveled_ray.codec.kept_tree`),
    #: from which a compare of this store starts: its size, ``"xxsmall"`` to ``"large"``
    #: (4 bytes per segment in memory), or ``"off"``. A compare with trees of this size or
    #: smaller uses it.
    tree_size: str = "large"

    _positive_ints = ("push_keys", "l0_max_keys", "max_l0_files", "max_unpersisted_keys",
                      "sst_max_keys", "sst_block_bytes", "bloom_bits_per_key")
    _choices = {"tree_size": ("off", "xxsmall", "xsmall", "small", "medium", "large")}
    _durations = ("push_ms", "max_write_delay_ms")
    _positive_durations = ("l0_max_age_s",)


@dataclass(frozen=True)
class JournalOptions(_Group):
    """How the Journal groups writes into files, catalogues them, and compacts them."""

    _group = "journal"

    #: How long a write waits for others to join its journal group before the group is written.
    #: 0 writes at once; writes that arrive while a group is in flight still join the next one.
    flush_ms: float = 0.0
    #: A journal group is written as soon as it holds this many bytes of values.
    flush_bytes: int = 8 * MIB
    #: Largest journal file. One ``put_many`` must fit in it (it is one atomic journal file);
    #: journal compaction writes files up to this size.
    max_file_bytes: int = 256 * MIB
    #: The Inker records new journal files in the manifest once this many are unrecorded ...
    catalog_files: int = 256
    #: ... or once the oldest unrecorded one is this many seconds old.
    catalog_s: float = 5.0
    #: Journal compaction runs every this many seconds (0: only on ``store.compact_journal()``).
    compaction_interval_s: float = 3600.0
    #: Journal compaction rewrites at most this many consecutive journal files at once ...
    max_run_length: int = 4
    #: ... and only when the run's share of current entries (in %) is below a target that
    #: rises from this, for one file, ...
    singlefile_compactionpercentage: float = 50.0
    #: ... to this, for a run of ``max_run_length`` files (leveled's defaults).
    maxrunlength_compactionpercentage: float = 70.0
    #: Entries sampled per journal file to score it.
    compaction_sample: int = 100
    #: Each group commit writes its own journal file, and every file costs an object and a
    #: manifest row. So once this many consecutive *small* journal files ...
    small_files: int = 1000
    #: ... or this many bytes of them (each under this size, and under half of
    #: ``max_file_bytes``) are catalogued, compaction rewrites them as one file, whatever
    #: their scores, and keeps every entry the Ledger has not persisted. It starts as they are
    #: catalogued, not only on the schedule.
    small_bytes: int = 1 * MIB
    #: What compaction keeps of replaced objects (tag ``o``): ``"retain"`` keeps their key
    #: changes as key deltas, so a Ledger rebuilt from the Journal has the full index history;
    #: ``"recovr"`` drops them.
    recovery_strategy: str = RETAIN

    _positive_ints = ("flush_bytes", "max_file_bytes", "catalog_files", "max_run_length",
                      "compaction_sample", "small_files", "small_bytes")
    _durations = ("flush_ms", "catalog_s", "compaction_interval_s",
                  "singlefile_compactionpercentage", "maxrunlength_compactionpercentage")
    _choices = {"recovery_strategy": RECOVERY_STRATEGIES}

    def _check(self) -> None:
        if self.small_files < 2:
            raise InvalidArgumentError(
                f"journal.small_files must be 2 or more, not {self.small_files!r}")


@dataclass(frozen=True)
class GcOptions(_Group):
    """What snapshots keep, and when garbage collection runs and what it may delete."""

    _group = "gc"

    #: A snapshot expires (and stops protecting the files it reads) this many seconds after it
    #: was taken, unless released earlier; ``long_running`` snapshots get the second timeout.
    snapshot_timeout_s: float = 900.0
    long_snapshot_timeout_s: float = 43_200.0
    #: A running store renews its snapshot lease (the oldest manifest version its snapshots
    #: and reads may use, which GC keeps) this often, and within a second when that version
    #: moves.
    lease_renew_s: float = 10.0
    #: Garbage collection runs inside the store every this many seconds (0: never; ``lr.gc``
    #: runs it on demand) ...
    interval_s: float = 600.0
    #: ... and deletes only objects older than this: an upload younger than it may still be
    #: about to be published. Merges and compactions whose outputs are older than half of it
    #: are not committed (they are redone), so GC never races a slow publisher; a pass given
    #: a smaller ``min_age`` still keeps that half while the store's writer runs.
    min_age_s: float = 3600.0

    @property
    def publish_window_s(self) -> float:
        """How long after it began an upload a writer may still publish it."""
        return self.min_age_s / 2

    _durations = ("interval_s",)
    _positive_durations = ("snapshot_timeout_s", "long_snapshot_timeout_s", "lease_renew_s",
                           "min_age_s")


@dataclass(frozen=True)
class DiskCacheOptions(_Group):
    """The node's cache on local disk, beside each process's memory cache: the footers and
    blocks that point reads fetched (:mod:`leveled_ray.files.disk_cache`). Every process of
    the node that reads a store (its Bookies, readers, snapshots) shares it, and it outlives
    them: a store reopened on the node, or restarted there by Ray, reads warm."""

    _group = "disk_cache"

    #: Most bytes the cache holds on disk (the oldest stored go first); 0 turns it off.
    size: int = 1 << 30
    #: Its directory; ``None``: ``leveled-ray-cache`` in the system's temporary directory.
    path: str | None = None
    #: Also cache stores on local disk (``file://``): off by default, as reading them is
    #: already a local read (``memory://`` stores are never cached).
    local_stores: bool = False
    #: How long an open waits for its warm start (:mod:`leveled_ray.files.warm_start`), which
    #: goes on in the background after (0: the open does not wait).
    warm_s: float = 2.0

    _counts = ("size",)
    _durations = ("warm_s",)
    _optional_strs = ("path",)

    def _check(self) -> None:
        if not isinstance(self.local_stores, bool):
            raise InvalidArgumentError(
                f"disk_cache.local_stores must be a bool, not {self.local_stores!r}")


#: The groups of :class:`Options`, by field name.
GROUPS = {"object_store": ObjectStoreOptions, "ledger": LedgerOptions,
          "journal": JournalOptions, "gc": GcOptions, "disk_cache": DiskCacheOptions}


@dataclass(frozen=True)
class Options(_Group):
    """Settings of a store. All sizes are in bytes, all times in the unit their name says.

    Example::

        lr.open("file:///tmp/db", options=lr.Options(
            compression="zstd", cache_size=256 << 20, gc={"min_age_s": 600}))
    """

    #: Codec for new SST blocks and journal entries: ``"lz4"``, ``"zstd"`` or ``"none"``. Each
    #: block and entry records its own codec, so switching it keeps old data readable.
    compression: str = "lz4"
    #: Byte budget of the Bookie's read cache: SST and journal footers, blooms, blocks and the
    #: values of recent writes (least recently used first out).
    cache_size: int = 128 * MIB
    #: Largest value accepted by ``put`` (under ``journal.max_file_bytes``).
    max_value_bytes: int = 16 * MIB
    #: Largest bucket or key, in encoded bytes.
    max_key_bytes: int = 4 * KIB
    #: Largest value of a ``head_only`` store (which keeps values in the Ledger).
    max_head_only_value_bytes: int = 4 * KIB
    #: A running store publishes its figures as Ray metrics (``leveled_*``, on each node's
    #: Prometheus endpoint) every this many seconds; 0 publishes none.
    metrics_interval_s: float = 5.0
    #: A shard's part of a cross-shard ``put_many`` that no one decides within this many seconds
    #: (its client died between prepare and commit) is decided by the shard: aborted, unless
    #: its commit record says commit already. Its keys wait for that decision meanwhile.
    txn_timeout_s: float = 30.0
    #: How long a transaction may run, from ``store.transaction()`` to its commit (its
    #: snapshot's timeout): a later read or commit is refused, and a holder that died keeps
    #: nothing past it (see :mod:`leveled_ray.client.transaction`).
    transaction_lifetime_s: float = 60.0
    #: Journal compaction keeps every change of the last this many seconds (and what a view
    #: of any moment in them needs), so ``snapshot(at_time=...)``, ``changes()`` and clones
    #: reach back that far; 0 keeps only what history leases hold.
    history_s: float = 0.0
    #: How many times Ray restarts a Bookie whose process or node died (failover: the
    #: restarted Bookie reopens its store by itself, see :mod:`leveled_ray.actors.failover`);
    #: -1 always, 0 never (calls then raise ``StoreClosedError`` until the store is reopened).
    max_restarts: int = -1
    object_store: ObjectStoreOptions = field(default_factory=ObjectStoreOptions)
    ledger: LedgerOptions = field(default_factory=LedgerOptions)
    journal: JournalOptions = field(default_factory=JournalOptions)
    gc: GcOptions = field(default_factory=GcOptions)
    disk_cache: DiskCacheOptions = field(default_factory=DiskCacheOptions)

    _positive_ints = ("max_value_bytes", "max_key_bytes", "max_head_only_value_bytes")
    _counts = ("cache_size",)
    _durations = ("metrics_interval_s", "history_s")
    _positive_durations = ("txn_timeout_s", "transaction_lifetime_s")
    _choices = {"compression": tuple(CODECS)}

    def __post_init__(self) -> None:
        for name, kind in GROUPS.items():  # a dict of a group's fields becomes the group
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, kind._build(value))
            elif not isinstance(value, kind):
                raise InvalidArgumentError(f"{name} must be a {kind.__name__} or a dict of its "
                                           f"fields, not {value!r}")
        super().__post_init__()

    def _check(self) -> None:
        if (not isinstance(self.max_restarts, int) or isinstance(self.max_restarts, bool)
                or self.max_restarts < -1):
            raise InvalidArgumentError(f"max_restarts must be an int >= -1, not "
                                       f"{self.max_restarts!r}")
        if self.max_value_bytes >= self.journal.max_file_bytes:
            raise InvalidArgumentError(
                "max_value_bytes must be smaller than journal.max_file_bytes")

    def replace(self, **changes) -> Options:
        """A copy with some fields changed (validated like a new one). A group given as a dict
        changes only the fields it names: ``options.replace(gc={"min_age_s": 0})``."""
        for name, value in changes.items():
            if name in GROUPS and isinstance(value, Mapping):
                changes[name] = getattr(self, name).replace(**value)
        return super().replace(**changes)

    @classmethod
    def text_names(cls) -> dict[str, str]:
        """Every setting's name as text (``compression``, ``gc.min_age_s``, ...), with its
        type as a string."""
        names = {}
        for f in dataclasses.fields(cls):
            if f.name in GROUPS:
                names.update((f"{f.name}.{g.name}", str(g.type))
                             for g in dataclasses.fields(GROUPS[f.name]))
            else:
                names[f.name] = str(f.type)
        return names

    @classmethod
    def from_text(cls, values: Mapping[str, object], base: Options | None = None, *,
                  ignore_unknown: bool = False) -> Options:
        """Options given as text (``--option gc.min_age_s=60`` on the command line, Spark
        options): each value converted to its field's type, on top of ``base`` (by default the
        defaults). Names that are not settings are refused, or skipped with
        ``ignore_unknown``."""
        kinds = cls.text_names()
        changes: dict = {}
        for name, text in values.items():
            kind = kinds.get(name)
            if kind is None:
                if ignore_unknown:
                    continue
                raise InvalidArgumentError(f"unknown option {name!r}: the names are lr.Options' "
                                           "fields, and its groups' fields as group.field")
            if text is None:
                continue
            group, _, leaf = name.rpartition(".")
            target = changes.setdefault(group, {}) if group else changes
            target[leaf] = value_from_text(name, kind, text)
        return (base or cls()).replace(**changes)
