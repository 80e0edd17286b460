"""Options: every setting of a store in one documented dataclass.

``lr.open(url, options=lr.Options(...))``. Each field has a default that suits a single machine;
the S3 fields fall back to the usual ``AWS_*`` environment variables when left ``None``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InvalidArgumentError

KIB = 1024
MIB = 1024 * KIB

COMPRESSIONS = ("lz4", "zstd", "none")
#: Fields that hold credentials: never shown by ``repr``, ``stats()``, the CLI or logs.
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
            return int(text) if kind.startswith("int") else float(text)
        except ValueError:
            raise InvalidArgumentError(f"option {name} must be a number, not {text!r}") from None
    if "None" in kind and text.lower() in ("", "none", "null"):
        return None
    return text


@dataclass(frozen=True)
class Options:
    """Settings of a store. All sizes are in bytes, all times in the unit their name says.

    Example::

        lr.open("file:///tmp/db", options=lr.Options(compression="zstd", cache_size=256 << 20))
    """

    #: Codec for new SST blocks and journal entries: ``"lz4"``, ``"zstd"`` or ``"none"``. Each
    #: block and entry records its own codec, so switching it keeps old data readable.
    compression: str = "lz4"
    #: How long a write waits for others to join its journal group before the group is written.
    #: 0 writes at once; writes that arrive while a group is in flight still join the next one.
    journal_flush_ms: float = 0.0
    #: A journal group is written as soon as it holds this many bytes of values.
    journal_flush_bytes: int = 8 * MIB
    #: Largest journal file. One ``put_many`` must fit in it (it is one atomic journal file);
    #: journal compaction writes files up to this size.
    max_journal_bytes: int = 256 * MIB
    #: Byte budget of the Bookie's read cache: SST and journal footers, blooms, blocks and the
    #: values of recent writes (least recently used first out).
    cache_size: int = 128 * MIB
    #: Largest value accepted by ``put``.
    max_value_bytes: int = 16 * MIB
    #: Largest bucket or key, in encoded bytes.
    max_key_bytes: int = 4 * KIB
    #: Largest value of a ``head_only`` store (which keeps values in the Ledger).
    max_head_only_value_bytes: int = 4 * KIB
    #: The Bookie pushes its recent Ledger changes to the Penciller once it holds this many ...
    push_keys: int = 4000
    #: ... or once the oldest unpushed change is this old.
    push_ms: float = 50.0
    #: The Penciller writes its L0 memory to an L0 SST file once it holds this many keys.
    l0_max_keys: int = 32_000
    #: ... or once its oldest change is this many seconds old, so that a quiet store persists
    #: its Ledger too: journal compaction can then reclaim what was replaced or deleted, and a
    #: restart replays little.
    l0_max_age_s: float = 60.0
    #: A running store publishes its figures as Ray metrics (``leveled_*``, on each node's
    #: Prometheus endpoint) every this many seconds; 0 publishes none.
    metrics_interval_s: float = 5.0
    #: Most L0 files waiting for a merge; beyond it the Penciller keeps changes in L0 memory.
    max_l0_files: int = 4
    #: Backpressure: changes acknowledged but not yet in an SST (the Bookie holds them). Past
    #: half of this, each write is delayed, in proportion, by up to ``max_write_delay_ms``; at
    #: the limit, writes wait until merges catch up, so memory stays bounded.
    max_unpersisted_keys: int = 400_000
    #: The longest delay backpressure adds to one write below the hard limit.
    max_write_delay_ms: float = 200.0
    #: A snapshot expires (and stops protecting the files it reads) this many seconds after it
    #: was taken, unless released earlier; ``long_running`` snapshots get the second timeout.
    snapshot_timeout_s: float = 900.0
    long_snapshot_timeout_s: float = 43_200.0
    #: A running store renews its snapshot lease (the oldest manifest version its snapshots
    #: and reads may use, which GC keeps) this often, and whenever that version moves.
    lease_renew_s: float = 10.0
    #: Garbage collection runs inside the store every this many seconds (0: never; ``lr.gc``
    #: runs it on demand) ...
    gc_interval_s: float = 600.0
    #: ... and deletes only objects older than this: an upload younger than it may still be
    #: about to be published. Merges and compactions whose outputs are older than half of it
    #: are not committed (they are redone), so GC never races a slow publisher.
    gc_min_age_s: float = 3600.0
    #: Journal compaction runs every this many seconds (0: only on ``store.compact_journal()``).
    journal_compaction_interval_s: float = 3600.0
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
    small_journal_files: int = 1000
    #: ... or this many bytes of them (each under this size, and under half of
    #: ``max_journal_bytes``) are catalogued, compaction rewrites them as one file, whatever
    #: their scores, and keeps every entry the Ledger has not persisted. It starts as they are
    #: catalogued, not only on the schedule.
    small_journal_bytes: int = 1 * MIB
    #: What compaction keeps of replaced objects (tag ``o``): ``"retain"`` keeps their key
    #: changes as key deltas, so a Ledger rebuilt from the Journal has the full index history;
    #: ``"recovr"`` drops them.
    recovery_strategy: str = "retain"
    #: Most entries in one SST written by a merge (levels 1 and below).
    sst_max_keys: int = 65_536
    #: Target uncompressed size of one SST block (one ranged GET on a point lookup).
    sst_block_bytes: int = 32 * KIB
    #: Bloom filter bits per key in SSTs (10 gives about 1% false positives).
    bloom_bits_per_key: int = 10
    #: The Inker records new journal files in the manifest once this many are unrecorded ...
    catalog_files: int = 256
    #: ... or once the oldest unrecorded one is this many seconds old.
    catalog_s: float = 5.0
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

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return repr(HIDDEN) if name in SECRET_FIELDS and value else repr(value)

        fields = ", ".join(f"{f.name}={shown(f.name)}" for f in dataclasses.fields(self))
        return f"Options({fields})"

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise InvalidArgumentError(
                f"compression must be one of {COMPRESSIONS}, not {self.compression!r}"
            )
        positive = (
            "journal_flush_bytes", "max_journal_bytes", "max_value_bytes", "max_key_bytes",
            "max_head_only_value_bytes",
            "push_keys", "l0_max_keys", "max_l0_files", "max_unpersisted_keys", "sst_max_keys",
            "sst_block_bytes", "max_run_length", "compaction_sample", "bloom_bits_per_key",
            "catalog_files", "small_journal_files", "small_journal_bytes",
        )
        for name in positive:
            check_positive_int(name, getattr(self, name))
        for name in ("cache_size", "max_retries"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(f"{name} must be an int >= 0, not {value!r}")
        for name in ("journal_flush_ms", "push_ms", "catalog_s", "max_write_delay_ms",
                     "journal_compaction_interval_s", "gc_interval_s",
                     "singlefile_compactionpercentage", "maxrunlength_compactionpercentage",
                     "retry_backoff_s", "metrics_interval_s"):
            check_number(name, getattr(self, name), minimum=0.0)
        for name in ("snapshot_timeout_s", "long_snapshot_timeout_s", "gc_min_age_s",
                     "request_timeout_s", "connect_timeout_s", "retry_timeout_s",
                     "retry_max_backoff_s", "write_resolve_s", "l0_max_age_s", "lease_renew_s"):
            check_number(name, getattr(self, name), minimum=0.0, inclusive=False)
        for name in ("s3_endpoint", "s3_region", "s3_access_key_id", "s3_secret_access_key",
                     "s3_session_token"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(f"{name} must be a str or None, not {value!r}")
        if not isinstance(self.hedge_requests, bool):
            raise InvalidArgumentError(
                f"hedge_requests must be a bool, not {self.hedge_requests!r}")
        if self.s3_allow_http is not None and not isinstance(self.s3_allow_http, bool):
            raise InvalidArgumentError(
                f"s3_allow_http must be a bool or None, not {self.s3_allow_http!r}")
        if self.recovery_strategy not in ("retain", "recovr"):
            raise InvalidArgumentError(
                f"recovery_strategy must be 'retain' or 'recovr', not {self.recovery_strategy!r}"
            )
        if self.small_journal_files < 2:
            raise InvalidArgumentError(
                f"small_journal_files must be 2 or more, not {self.small_journal_files!r}")
        if self.max_value_bytes >= self.max_journal_bytes:
            raise InvalidArgumentError("max_value_bytes must be smaller than max_journal_bytes")
        if self.retry_backoff_s > self.retry_max_backoff_s:
            raise InvalidArgumentError("retry_backoff_s must not exceed retry_max_backoff_s")

    @classmethod
    def from_text(cls, values: Mapping[str, object], base: Options | None = None, *,
                  ignore_unknown: bool = False) -> Options:
        """Options given as text (``--option name=value`` on the command line, Spark options):
        each value converted to its field's type, on top of ``base`` (by default the
        defaults). Names that are not fields are refused, or skipped with
        ``ignore_unknown``."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        changes = {}
        for name, text in values.items():
            field = fields.get(name)
            if field is None:
                if ignore_unknown:
                    continue
                raise InvalidArgumentError(f"unknown option {name!r}: the names are the fields "
                                           "of lr.Options")
            if text is not None:
                changes[name] = value_from_text(name, str(field.type), text)
        return (base or cls()).replace(**changes)

    def replace(self, **changes) -> Options:
        """A copy with some fields changed (validated like a new one)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidArgumentError(f"unknown option(s): {sorted(unknown)}")
        return dataclasses.replace(self, **changes)
