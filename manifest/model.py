"""The manifest: an immutable, numbered object that describes the whole store.

``manifest/<20-digit id>`` is created with put-if-absent; the highest id is current (SlateDB's
manifest RFC). A manifest holds the writer epoch, the catalogued journal files and the next
journal slot, the Ledger's levels and persisted SQN, checkpoints and the clone parent.

Encoding: ``magic | version u16 | codec u8 | raw_len u32 | checksum u64 | token | payload``
where the payload is a compressed msgpack document whose ``id`` must match the object's name,
and ``token`` is 16 random bytes: a writer whose create of a version had an unknown outcome
reads the header back to learn whether the version there is its own. The checksum covers the
token and the payload.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from dataclasses import astuple, dataclass, field, replace

import msgpack

from ..codec.tictac import TREE_KEYS
from ..errors import CorruptObjectError
from ..files.framing import CODEC_LZ4, Reader, checksum, compress, decompress
from ..files.journal import JournalInfo
from ..files.lru import LruCache
from ..files.names import manifest_name
from ..files.sst import SstInfo

MAGIC = b"LRMAN\x00\x00\x01"
VERSION = 2
_HEAD = struct.Struct("<8sHBIQ16s")
#: The bytes that identify one write of a manifest version (its header, with the token).
IDENTITY_BYTES = _HEAD.size


@dataclass(frozen=True)
class HistoryLease:
    """A consumer's hold on history: journal compaction keeps every change after ``sqn``
    until ``expires_at`` (see :mod:`leveled_ray.manifest.history`)."""

    name: str
    sqn: int
    expires_at: float


@dataclass(frozen=True)
class Checkpoint:
    """A durable pin of one manifest version (SlateDB), with an optional expiry."""

    id: str
    manifest_id: int
    expires_at: float | None
    created_at: float
    name: str | None = None


@dataclass(frozen=True)
class CloneParent:
    """Where a clone's shared files come from: the parent store and the checkpoint it owns there."""

    url: str
    checkpoint_id: str


@dataclass(frozen=True)
class KeptTree:
    """The Ledger's tictac tree, saved when its writer closed (``ledger/<ulid>.tree``; see
    :mod:`leveled_ray.codec.kept_tree`): of store ``store_id`` at ``ledger_sqn``. A version
    whose store or Ledger moved on (a flush, a bulk write, a clone's or a split's new store)
    holds it no more: :meth:`Manifest.kept_tree`."""

    name: str
    size: str
    store_id: str
    ledger_sqn: int
    has_ttl: bool = False
    #: How its key hashes were made (:data:`~leveled_ray.codec.tictac.TREE_KEYS`; a tree
    #: saved before this was recorded hashed by an earlier rule, ``0``, and is not used).
    keys: int = 0


@dataclass(frozen=True)
class Manifest:
    store_id: str
    writer_epoch: int = 0
    #: Catalogued journal files (data and fences), in slot / SQN order.
    journal: tuple[JournalInfo, ...] = ()
    #: Every slot below this is catalogued; recovery lists the slots from here on.
    journal_next_slot: int = 0
    #: Every change up to this SQN is in the Ledger's SSTs.
    ledger_sqn: int = 0
    #: ``levels[0]`` is L0 (newest file first); deeper levels are sorted by key range.
    levels: tuple[tuple[SstInfo, ...], ...] = ((),)
    checkpoints: tuple[Checkpoint, ...] = ()
    parent: CloneParent | None = None
    initialized: bool = True
    destroyed_at: float | None = None
    created_at: float = field(default_factory=lambda: time.time())
    #: Store-wide settings fixed at creation (for example the head_only mode).
    settings: tuple[tuple[str, str], ...] = ()
    #: A clone's ancestors whose files it still reads: ``(store_id, url)``. Their files appear
    #: in ``levels`` and ``journal`` as ``@<store_id>/<name>``.
    stores: tuple[tuple[str, str], ...] = ()
    #: Every change above this SQN is still in the Journal (see ``manifest.history``).
    history_sqn: int = 0
    leases: tuple[HistoryLease, ...] = ()
    #: Streaming writers' last applied batches, ``(writer, batch id)``: a batch is installed
    #: once, even when the stream retries it (see ``manifest.ingest``).
    stream_batches: tuple[tuple[str, int], ...] = ()
    #: A shard retired by a split: the epoch of the splitter that retired it, which names its
    #: children (see ``cluster.split``). Nothing opens or writes it again.
    split_epoch: int | None = None
    tree: KeptTree | None = None

    @classmethod
    def new(cls, **settings: str) -> Manifest:
        return cls(store_id=str(uuid.uuid4()), settings=tuple(sorted(settings.items())))

    def with_changes(self, **changes) -> Manifest:
        return replace(self, **changes)

    def kept_tree(self) -> KeptTree | None:
        """The saved tree, if it is still this version's Ledger's."""
        tree = self.tree
        return tree if (tree is not None and tree.store_id == self.store_id
                        and tree.ledger_sqn == self.ledger_sqn
                        and tree.keys == TREE_KEYS) else None

    @property
    def max_journal_sqn(self) -> int:
        return max((j.max_sqn for j in self.journal if j.entries), default=0)

    def sst_files(self):
        for level in self.levels:
            yield from level

    def setting(self, name: str, default: str | None = None) -> str | None:
        return dict(self.settings).get(name, default)


def listed_twice(manifest: Manifest) -> list[str]:
    """Files a manifest lists more than once (a valid manifest lists each file once)."""
    names = [s.name for s in manifest.sst_files()] + [j.name for j in manifest.journal]
    seen: set[str] = set()
    return sorted({n for n in names if n in seen or seen.add(n)})


def check_invariants(manifest: Manifest, manifest_id: int) -> None:
    """Refuse a manifest that lists a file twice: a merge could then delete a file that the
    manifest still lists."""
    twice = listed_twice(manifest)
    if twice:
        raise CorruptObjectError(manifest_name(manifest_id), 0,
                                 f"lists files more than once: {twice[:3]}")


def _sst_row(s: SstInfo) -> list:
    return [s.name, s.size, s.entries, s.tombstones, s.min_key, s.max_key, s.min_sqn, s.max_sqn]


def _journal_row(j: JournalInfo) -> list:
    return [j.name, j.slot, j.epoch, j.kind, j.size, j.entries, j.min_sqn, j.max_sqn]


def encode(manifest: Manifest, manifest_id: int, codec: int = CODEC_LZ4) -> bytes:
    doc = {
        "v": VERSION,
        "id": manifest_id,
        "store": manifest.store_id,
        "epoch": manifest.writer_epoch,
        "journal": [_journal_row(j) for j in manifest.journal],
        "next_slot": manifest.journal_next_slot,
        "ledger_sqn": manifest.ledger_sqn,
        "levels": [[_sst_row(s) for s in level] for level in manifest.levels],
        "checkpoints": [
            [c.id, c.manifest_id, c.expires_at, c.created_at, c.name] for c in manifest.checkpoints
        ],
        "parent": None if manifest.parent is None else [manifest.parent.url,
                                                        manifest.parent.checkpoint_id],
        "initialized": manifest.initialized,
        "destroyed_at": manifest.destroyed_at,
        "created_at": manifest.created_at,
        "settings": [list(kv) for kv in manifest.settings],
        "stores": [list(kv) for kv in manifest.stores],
        "history_sqn": manifest.history_sqn,
        "leases": [[h.name, h.sqn, h.expires_at] for h in manifest.leases],
        "stream_batches": [list(kv) for kv in manifest.stream_batches],
        "split_epoch": manifest.split_epoch,
        "tree": None if manifest.tree is None else list(astuple(manifest.tree)),
    }
    raw = msgpack.packb(doc, use_bin_type=True)
    used, payload = compress(codec, raw)
    token = os.urandom(16)
    return _HEAD.pack(MAGIC, VERSION, used, len(raw), checksum(token + payload), token) + payload


#: Manifests decoded lately, by their bytes: a process's parts read the same versions again
#: and again (every shard's lookups, GC, compaction), and decoding is most of a read's CPU.
#: A manifest is immutable, so identical bytes decode to the same one.
_DECODED = LruCache(4 << 20)


def decode(data: bytes, path: str, expect_id: int | None = None) -> Manifest:
    """Validate and decode a manifest object."""
    if not isinstance(data, bytes):
        return _decode(data, path, expect_id)
    key = (data, expect_id)
    manifest = _DECODED.get(key)
    if manifest is None:
        manifest = _decode(data, path, expect_id)
        _DECODED.put(key, manifest, 4 * len(data))  # its bytes, and about what it decodes to
    return manifest


def _decode(data: bytes, path: str, expect_id: int | None) -> Manifest:
    r = Reader(data, path)
    if len(data) < _HEAD.size:
        raise CorruptObjectError(path, 0, "too short to be a manifest")
    magic, version, codec, raw_len, psum, token = r.unpack(_HEAD)
    if magic != MAGIC:
        raise CorruptObjectError(path, 0, "bad manifest magic")
    if version != VERSION:
        raise CorruptObjectError(path, 8, f"unsupported manifest format version {version}")
    payload = r.take(r.remaining())
    if checksum(token + payload) != psum:
        raise CorruptObjectError(path, _HEAD.size, "manifest checksum mismatch")
    raw = decompress(codec, payload, raw_len, path, _HEAD.size)
    try:
        doc = msgpack.unpackb(raw, raw=False)
        if doc["v"] != VERSION:
            raise ValueError("body version does not match the header")
        if expect_id is not None and doc["id"] != expect_id:
            raise ValueError(f"holds id {doc['id']}, not {expect_id}")
        parent = doc["parent"]
        manifest = Manifest(
            store_id=str(doc["store"]),
            writer_epoch=int(doc["epoch"]),
            journal=tuple(JournalInfo(*row) for row in doc["journal"]),
            journal_next_slot=int(doc["next_slot"]),
            ledger_sqn=int(doc["ledger_sqn"]),
            levels=tuple(tuple(SstInfo(*row) for row in level) for level in doc["levels"]),
            checkpoints=tuple(Checkpoint(*row) for row in doc["checkpoints"]),
            parent=None if parent is None else CloneParent(*parent),
            initialized=bool(doc["initialized"]),
            destroyed_at=doc["destroyed_at"],
            created_at=float(doc["created_at"]),
            settings=tuple(tuple(kv) for kv in doc["settings"]),
            stores=tuple(tuple(kv) for kv in doc.get("stores", ())),
            history_sqn=int(doc.get("history_sqn", 0)),
            leases=tuple(HistoryLease(str(n), int(q), float(e))
                         for n, q, e in doc.get("leases", ())),
            stream_batches=tuple((str(w), int(b)) for w, b in doc.get("stream_batches", ())),
            split_epoch=doc.get("split_epoch"),
            tree=None if doc.get("tree") is None else KeptTree(*doc["tree"]),
        )
    except CorruptObjectError:
        raise
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        raise CorruptObjectError(path, _HEAD.size, f"malformed manifest: {exc}") from None
    if listed_twice(manifest):
        raise CorruptObjectError(path, _HEAD.size,
                                 f"lists files more than once: {listed_twice(manifest)[:3]}")
    return manifest
