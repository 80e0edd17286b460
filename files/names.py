"""Object names. A name is never reused: journal slots are claimed with put-if-absent, and every
other file gets a ULID (48-bit milliseconds plus 80 random bits)."""

from __future__ import annotations

import os
import re
import time

import xxhash

MANIFEST_PREFIX = "manifest/"
JOURNAL_PREFIX = "journal/"
LEDGER_PREFIX = "ledger/"
#: Snapshot leases: one object per writer epoch (see :mod:`leveled_ray.manifest.snapshot_leases`).
LEASE_PREFIX = "leases/"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SLOT_RE = re.compile(r"^journal/(\d{20})\.jnl$")
_MANIFEST_RE = re.compile(r"^manifest/(\d{20})$")
_LEASE_RE = re.compile(r"^leases/snapshots-(\d{20})$")


def file_kind(path: str) -> str:
    """What an object is, by its name: ``manifest``, ``journal``, ``sst`` or ``other``
    (a clone's ``@<ancestor>/`` prefix is looked through)."""
    if path.startswith("@"):
        path = path.split("/", 1)[-1]
    if path.startswith(MANIFEST_PREFIX):
        return "manifest"
    if path.startswith(JOURNAL_PREFIX):
        return "journal"
    return "sst" if path.startswith(LEDGER_PREFIX) else "other"


def ulid(at: float | None = None) -> str:
    """A new ULID: named now (or at ``at``, Unix seconds), sorting by that time."""
    ms = time.time_ns() // 1_000_000 if at is None else int(at * 1000)
    value = ms << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def ulid_time(path: str) -> float | None:
    """When the file ``path`` (named with :func:`ulid`) was named, in Unix seconds, or
    ``None``."""
    stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
    if len(stem) != 26 or any(ch not in _CROCKFORD for ch in stem):
        return None
    value = 0
    for ch in stem:
        value = value * 32 + _CROCKFORD.index(ch)
    return (value >> 80) / 1000.0


def ulid_age(path: str, now: float) -> float | None:
    """Seconds since the file ``path`` (named with :func:`ulid`) was named, or ``None``."""
    named = ulid_time(path)
    return None if named is None else now - named


def manifest_name(manifest_id: int) -> str:
    return f"{MANIFEST_PREFIX}{manifest_id:020d}"


def manifest_id_of(path: str) -> int | None:
    m = _MANIFEST_RE.match(path)
    return int(m.group(1)) if m else None


def journal_slot_name(slot: int) -> str:
    """Group-commit journal files take consecutive slots: the writer-fencing sequence."""
    return f"{JOURNAL_PREFIX}{slot:020d}.jnl"


def journal_slot_of(path: str) -> int | None:
    m = _SLOT_RE.match(path)
    return int(m.group(1)) if m else None


def compacted_journal_name() -> str:
    return f"{JOURNAL_PREFIX}c/{ulid()}.jnl"


def stable_journal_name(source: str) -> str:
    """A compacted-journal name derived from another file's name (the same one every time),
    shaped like :func:`compacted_journal_name`."""
    value = xxhash.xxh3_128_intdigest(source.encode()) >> 2  # 126 bits: 26 Crockford digits
    return f"{JOURNAL_PREFIX}c/" + "".join(_CROCKFORD[(value >> shift) & 31]
                                           for shift in range(125, -1, -5)) + ".jnl"


def sst_name() -> str:
    return f"{LEDGER_PREFIX}{ulid()}.sst"


def snapshot_lease_name(epoch: int) -> str:
    """The snapshot lease of writer epoch ``epoch``."""
    return f"{LEASE_PREFIX}snapshots-{epoch:020d}"


def lease_epoch_of(path: str) -> int | None:
    m = _LEASE_RE.match(path)
    return int(m.group(1)) if m else None
