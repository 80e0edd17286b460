"""Commit records of cross-shard ``put_many``: whoever creates the record first decides.

A batch whose items fall in several shards is prepared in each (see
:mod:`leveled_ray.actors.participant`), then decided by one small object at the store's root,
``txn/<id>``, created with create-if-absent: ``commit`` by the client once every shard has
prepared its part, or ``abort`` by a shard whose part waited too long for a decision (its
client may be dead). Whichever create lands first is the decision, for everyone: the client
and every shard read it back when their own create finds the name taken. This is the idea
of Percolator's primary lock and of persist's txn-wal, on create-if-absent alone.

A micro-batch of a streaming write (Spark's ``writeStream``) that Spark may run again is
committed under a name of its own, ``stream.<writer>.<batch>.<attempt>``: an attempt first
claims its name (``txn/<name>.claim``, create-if-absent), and a later attempt decides every
earlier one it finds (``abort`` unless it was committed), so at most one attempt of a batch
is ever committed, and a batch run again after its commit finds that and changes nothing.
A writer's records stay until a newer batch of it has records (see
:func:`unneeded_stream_records`).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import uuid
from dataclasses import dataclass

from ..errors import CorruptObjectError
from ..files.store import NotFound, ObjectStore

TXN_PREFIX = "txn/"
COMMIT, ABORT = "commit", "abort"
PART_FORMAT = b"LRPART2\n"


@dataclass(frozen=True)
class Part:
    """A shard's prepared part, as its store holds it until the batch is settled: checked
    changes and their values (a ``put_many``), or the files of a bulk write to install
    (``files``: journal files and SSTs, written already, named by no manifest yet). Garbage
    collection keeps the files a part names (see :mod:`leveled_ray.admin.gc`)."""

    root_url: str
    changes: tuple = ()
    values: tuple = ()
    files: tuple[tuple, tuple] | None = None
    #: A ``put_many`` part: the shard's next SQN when it was prepared. Its keys are locked
    #: from then until it is applied, so an entry of one of them at or above it was written
    #: by this part or after it (``None``: a part written before this was recorded).
    after: int | None = None

    def file_names(self) -> list[str]:
        return [] if self.files is None else [f.name for group in self.files for f in group]

    @property
    def first_sqn(self) -> int | None:
        """A bulk write's lowest SQN (its window was reserved when it began); ``None`` for
        a ``put_many``'s part, which takes SQNs when it is applied."""
        journal = () if self.files is None else self.files[0]
        return min((j.min_sqn for j in journal), default=None)


def applied_already(part: Part, newest: list[int | None]) -> bool:
    """Whether a ``put_many`` part found in the store (after a restart) was applied before
    its part object could be deleted, given the SQN of the newest entry of each of its keys
    (``None``: none): its keys were locked from its prepare until it was applied, as one
    group, so any entry at or above ``part.after`` is its own or a later write's."""
    return part.after is not None and any(s is not None and s >= part.after for s in newest)


def installed_already(part: Part, next_sqn: int) -> bool:
    """Whether a bulk write's part found in the store was installed before its part object
    was deleted (found again after a restart, or a copy of its create landed after the
    delete), given the shard's next SQN: the store gave out SQNs above its window, and a
    shard settles the parts below a bulk write's window before it installs that write (see
    :func:`settle_before`), so this part, once decided, went in (or out) first. (Its files'
    names need not be in the journal any more: journal compaction rewrites them.)"""
    return part.first_sqn is not None and part.first_sqn < next_sqn


def settle_before(parts: dict[str, Part], first_sqn: int) -> list[str]:
    """The bulk-write parts a shard must settle before it installs a bulk write whose
    lowest SQN is ``first_sqn``, lowest first: those whose SQN windows lie below it. Once
    that write's files are in, the
    store has given out SQNs above theirs, so they could never be installed; settled first,
    each is installed if its record says commit and dropped otherwise (the settler creates
    ``abort`` when no record exists). So of two bulk writes committed out of order, the
    later commit is either refused before its record says commit, or installed in window
    order: a committed part never meets a store it cannot go into."""
    lower = [(p.first_sqn, t) for t, p in parts.items()
             if p.first_sqn is not None and p.first_sqn < first_sqn]
    return [t for _, t in sorted(lower)]


def encode_part(part: Part) -> bytes:
    """The part object's bytes (read only by the shard's own Bookies and GC: the changes
    were validated by the client and checked by the shard)."""
    return PART_FORMAT + pickle.dumps(part, protocol=5)


def decode_part(data: bytes, name: str) -> Part:
    if not data.startswith(PART_FORMAT):
        raise CorruptObjectError(name, 0, "damaged prepared part")
    try:
        part = pickle.loads(data[len(PART_FORMAT):])
    except Exception as exc:
        raise CorruptObjectError(name, 0, f"damaged prepared part: {exc}") from None
    if not isinstance(part, Part):
        raise CorruptObjectError(name, 0, "damaged prepared part")
    return part


def record_name(txn_id: str) -> str:
    """The commit record, at the store's root."""
    return f"{TXN_PREFIX}{txn_id}"


def part_name(txn_id: str) -> str:
    """A shard's prepared part, in the shard's own store."""
    return f"{TXN_PREFIX}{txn_id}.part"


def txn_of_part(path: str) -> str | None:
    """The batch id of a prepared part's object name (``None`` for other names)."""
    if path.startswith(TXN_PREFIX) and path.endswith(".part"):
        return path[len(TXN_PREFIX):-len(".part")]
    return None


STREAM_TXN = "stream."
_STREAM_RECORD = re.compile(r"^stream\.([0-9a-f]{24})\.(\d{12})\.(\d{4,})(\.claim)?$")


def stream_txn(writer: str, batch: int, attempt: int) -> str:
    """The batch id of attempt ``attempt`` to commit micro-batch ``batch`` of the streaming
    writer named ``writer`` (any text: it is hashed into the name)."""
    key = hashlib.sha256(writer.encode()).hexdigest()[:24]
    return f"{STREAM_TXN}{key}.{batch:012d}.{attempt:04d}"


def claim_name(txn_id: str) -> str:
    """The object an attempt of a streaming write creates before it prepares anything."""
    return f"{TXN_PREFIX}{txn_id}.claim"


def unneeded_stream_records(paths, held: set[str]) -> list[str]:
    """The records (claims and decisions, at the root) of streaming-write batches that a
    newer batch of the same writer supersedes (Spark runs again only a writer's newest
    batch), and that no shard's part waits on. Other paths are not looked at."""
    found = []
    newest: dict[str, int] = {}
    for path in paths:
        match = _STREAM_RECORD.match(path.removeprefix(TXN_PREFIX))
        if match is not None:
            writer, batch = match.group(1), int(match.group(2))
            txn = path.removeprefix(TXN_PREFIX).removesuffix(".claim")
            found.append((path, writer, batch, txn))
            newest[writer] = max(newest.get(writer, batch), batch)
    return [path for path, writer, batch, txn in found
            if batch < newest[writer] and txn not in held]


def encode_record(decision: str, numbers: dict | None = None) -> bytes:
    doc: dict = {"decision": decision}
    if numbers:  # each shard's part number, for whoever applies a part other than the client
        doc["numbers"] = {str(shard): list(number) for shard, number in numbers.items()}
    return json.dumps(doc).encode()


def decode_record(data: bytes, name: str) -> str:
    try:
        decision = json.loads(data)["decision"]
    except (ValueError, KeyError, TypeError):
        decision = None
    if decision not in (COMMIT, ABORT):
        raise CorruptObjectError(name, 0, "damaged commit record")
    return decision


def record_numbers(data: bytes) -> dict[str, tuple] | None:
    """The part numbers by shard label a ``commit`` record carries (``None``: none)."""
    try:
        numbers = json.loads(data).get("numbers")
        return None if numbers is None else {s: tuple(n) for s, n in numbers.items()}
    except (ValueError, AttributeError, TypeError):
        return None


async def decide(root: ObjectStore, txn_id: str, decision: str,
                 numbers: dict | None = None) -> str:
    """Create the record with ``decision`` unless one exists; returns the decision that holds
    (ours, or the one created first). A client's ``commit`` carries ``numbers``, each shard's
    part number, so that a part applied by a cut, a timeout or a restart is noted as the
    client's own apply notes it (see ``Participant.notes``)."""
    name = record_name(txn_id)
    if await root.put_if_absent_async(name, encode_record(decision, numbers)):
        return decision
    return decode_record(await root.get_async(name), name)


async def claim_stream_batch(root: ObjectStore, writer: str,
                             batch: int) -> tuple[str, bool]:
    """``(batch id, True)``: a new attempt to commit streaming batch ``(writer, batch)``,
    claimed for the caller; or ``(its id, False)``: an earlier attempt was committed (the
    batch is decided: its shards may still be installing it). Each earlier attempt still
    undecided is aborted here."""
    attempt, token = 0, uuid.uuid4().hex.encode()  # the same bytes would read back as ours
    while True:
        txn = stream_txn(writer, batch, attempt)
        if await root.put_if_absent_async(claim_name(txn), token):
            return txn, True
        if await decide(root, txn, ABORT) == COMMIT:
            return txn, False
        attempt += 1


async def read_numbers(root: ObjectStore, txn_id: str) -> dict[str, tuple] | None:
    """The part numbers the record of ``txn_id`` carries, or ``None``."""
    try:
        return record_numbers(await root.get_async(record_name(txn_id)))
    except NotFound:
        return None


async def read_decision(root: ObjectStore, txn_id: str) -> str | None:
    """The decision recorded for ``txn_id``, or ``None`` if none is (yet, or any longer)."""
    name = record_name(txn_id)
    try:
        return decode_record(await root.get_async(name), name)
    except NotFound:
        return None
