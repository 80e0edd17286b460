"""Tictac trees (leveled's ``leveled_tictac``): Merkle trees of XOR-combined segment hashes that
tell which keys differ between two stores by exchanging kilobytes. Pure; numpy for bulk work.

Shape. A tree of ``size`` has ``segments`` leaves (a power of two, from 4 096 for ``xxsmall``
to 1 048 576 for ``large``), grouped into branches of :data:`BRANCH_WIDTH` segments. Each
segment and each branch holds a 32-bit hash; the *root* is the branches' hashes
(``branches * 4`` bytes: 16 KiB for ``large``, whose whole tree is 4 MiB).

Entries. An object's *key hash* is ``xxh3_64(Ledger key, seed=SEED)``: its top bits pick the
segment. The Ledger key holds each name's type, so ``"k"`` and ``b"k"`` are two keys here as
everywhere (:data:`TREE_KEYS` numbers this rule: trees and SST hints made by an earlier one
are not used). The *entry hash* mixes the key hash with the value's hash (the object's
``Head.hash``, xxh3-64 of the value) into 32 bits (:func:`entry_hash`), and it is XORed into
the segment and its branch. So the tree depends only on the set
of ``(key, value)`` pairs: not on the order they were added, their SQNs, or how the store is
laid out. Removing an entry XORs it in again, and trees of disjoint key sets (a sharded
store's shards) merge by XOR into the tree of their union.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import lz4.block
import numpy as np
import xxhash

from ..errors import InvalidArgumentError

#: Segments per size (leveled's names; each is 4x the one before).
SIZES = {"xxsmall": 1 << 12, "xsmall": 1 << 14, "small": 1 << 16, "medium": 1 << 18,
         "large": 1 << 20}
#: Segments per branch: a branch is 1 KiB of segment hashes.
BRANCH_WIDTH = 256
#: The seed of the key hash: segments must not follow the shard routing's partitions (which
#: hash the same key unseeded), so that each shard's keys spread over every segment.
SEED = 0x7469637461632D31  # "tictac-1"
#: The encoded tree's formats: 1 holds the leaves as they are, 2 compressed (lz4: a store's
#: saved ``large`` tree is 4 MiB, mostly zeros while the store is small), 3 only the segments
#: that are not zero (their numbers, then their hashes; lz4): a small store's tree loads and
#: saves without a pass over 4 MiB.
DENSE, PACKED, SPARSE = 1, 2, 3


def check_size(size) -> str:
    if size not in SIZES:
        raise InvalidArgumentError(f"tree size must be one of {sorted(SIZES, key=SIZES.get)}, "
                                   f"not {size!r}")
    return size


def key_hash(lkey: bytes) -> int:
    """The 64-bit key hash of an object's Ledger key."""
    return xxhash.xxh3_64_intdigest(lkey, seed=SEED)


def key_hashes(lkeys) -> np.ndarray:
    """:func:`key_hash` of many Ledger keys, as ``uint64``."""
    return np.fromiter((xxhash.xxh3_64_intdigest(k, seed=SEED) for k in lkeys),
                       dtype=np.uint64, count=len(lkeys))


#: How key hashes are made: 1 hashes the Ledger key as it is. (Before, ``0``, a ``str``
#: name hashed as its UTF-8 bytes, so ``"k"`` and ``b"k"`` were one key in a tree, and the
#: same object under both names XORed out.) Kept trees and SST segment hints record it.
TREE_KEYS = 1


def tree_key_hashes(lkeys: list[bytes]) -> np.ndarray:
    """The key hashes a tree uses for Ledger keys: :func:`key_hashes`, under
    :data:`TREE_KEYS`."""
    return key_hashes(lkeys)


#: Bits of a key hash an SST keeps as a *segment hint* (each block's distinct ones in SST
#: format 3, every row's from format 4; format 2 kept 16): a tree's segment is the hash's top
#: bits, so a hint tells a segment of any tree exactly, and a fold of 100 segments of a
#: ``large`` tree reads about 8% of the blocks.
HINT_BITS = 32
#: The size of tree a compare exchanges, and a store keeps, unless told otherwise: with
#: a ``large`` tree's segments, a fold of 100 dirty ones reads about 8% of the blocks.
DEFAULT_SIZE = "large"


def hints_of(khashes: np.ndarray) -> np.ndarray:
    """The segment hints (top :data:`HINT_BITS` bits) of key hashes, as ``uint32``."""
    return (np.asarray(khashes, dtype=np.uint64) >> np.uint64(64 - HINT_BITS)).astype(np.uint32)


def hints_in_segments(hints: np.ndarray, hint_bits: int, segments: np.ndarray,
                      bits: int) -> np.ndarray:
    """Which of ``hints`` (unsigned, of ``hint_bits`` bits each) may be keys of ``segments``
    of a tree of ``2**bits`` segments, as a bool per hint: a lookup in a table of one bool
    per segment (at most a ``large`` tree's 1 MiB), so a footer's million hints take
    milliseconds."""
    if bits <= hint_bits:
        return _member(hints >> hints.dtype.type(hint_bits - bits), segments, bits)
    return _member(hints, segments >> (bits - hint_bits), hint_bits)


def _member(values: np.ndarray, members: np.ndarray, bits: int) -> np.ndarray:
    # np.take, not indexing: it reads the unsigned values as they are (indexing converts
    # them to intp first, at twice the cost)
    return np.take(_table(bits, np.asarray(members, dtype=np.int64).tobytes()), values)


@functools.lru_cache(maxsize=4)
def _table(bits: int, members: bytes) -> np.ndarray:
    """One bool per value of ``bits`` bits, set for ``members`` (int64s): kept for the next
    footers of the same fold, as making a ``large`` tree's table took most of a lookup."""
    table = np.zeros(1 << bits, dtype=bool)
    table[np.frombuffer(members, dtype=np.int64)] = True
    table.flags.writeable = False
    return table


def among(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``sorted_set`` (``np.isin`` for a small sorted set: a
    binary search each, with no sort of ``values``)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


class SegmentFilter:
    """The tictac segments a fold keeps: ``segments`` of a tree of ``size`` (checked: bad
    input raises ``InvalidArgumentError``)."""

    __slots__ = ("size", "segments", "bits", "_shift")

    def __init__(self, segments, size: str = DEFAULT_SIZE):
        count = SIZES[check_size(size)]
        segments = list(segments) if isinstance(segments, Iterable) else [segments]
        if any(not isinstance(s, (int, np.integer)) or isinstance(s, bool) or not 0 <= s < count
               for s in segments):
            raise InvalidArgumentError(f"segments must be ints from 0 to {count - 1} (a {size} "
                                       f"tree), not {segments!r}")
        picked = sorted({int(s) for s in segments})
        self.size = size
        self.segments = np.asarray(picked, dtype=np.int64)
        self.bits = count.bit_length() - 1
        self._shift = np.uint64(64 - self.bits)

    def mask(self, lkeys) -> np.ndarray:
        """Which of these Ledger keys fall in the segments."""
        return among((tree_key_hashes(lkeys) >> self._shift).astype(np.int64), self.segments)


def segment_of(khash: int, segments: int) -> int:
    """The segment of a key hash, in a tree of ``segments`` segments: its top bits."""
    return khash >> (64 - segments.bit_length() + 1)


MIX_1, MIX_2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's finalizer
MASK64 = (1 << 64) - 1


def entry_hash(khash: int, value_hash: int) -> int:
    """The 32-bit hash an entry XORs into its segment: the key and value hashes mixed (not
    merely XORed: then every key whose value changes from one value to another would change
    its segment by the same amount, and two such keys in one branch would cancel out in the
    branch's hash, hiding both)."""
    z = khash ^ value_hash
    z = ((z ^ (z >> 30)) * MIX_1) & MASK64
    z = ((z ^ (z >> 27)) * MIX_2) & MASK64
    return (z ^ (z >> 31)) >> 32


class TicTacTree:
    """A tictac tree; see the module docstring. ``add`` and ``remove`` are the same XOR."""

    __slots__ = ("size", "segments", "leaves")

    def __init__(self, size: str = DEFAULT_SIZE, leaves: np.ndarray | None = None):
        self.size = check_size(size)
        self.segments = SIZES[size]
        self.leaves = (np.zeros(self.segments, dtype=np.uint32) if leaves is None
                       else leaves.astype(np.uint32, copy=False))
        if self.leaves.shape != (self.segments,):
            raise InvalidArgumentError(f"a {size} tree has {self.segments} segments")

    @property
    def branches(self) -> int:
        return self.segments // BRANCH_WIDTH

    # -- building --

    def add_hashes(self, khashes: np.ndarray, value_hashes: np.ndarray) -> None:
        """XOR the entries of these key and value hashes (uint64 arrays) in (or out again)."""
        khashes = np.asarray(khashes, dtype=np.uint64)
        value_hashes = np.asarray(value_hashes, dtype=np.uint64)
        shift = np.uint64(64 - self.segments.bit_length() + 1)
        segments = (khashes >> shift).astype(np.int64)
        z = khashes ^ value_hashes  # entry_hash, on arrays (uint64 products wrap, as there)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_2)
        entries = ((z ^ (z >> np.uint64(31))) >> np.uint64(32)).astype(np.uint32)
        np.bitwise_xor.at(self.leaves, segments, entries)

    def add(self, pairs: Iterable[tuple[bytes, int]]) -> None:
        """XOR ``(Ledger key, value hash)`` pairs in (or out again: see :meth:`remove`)."""
        keys, values = [], []
        for lkey, value_hash in pairs:
            keys.append(key_hash(lkey))
            values.append(value_hash)
        self.add_hashes(np.array(keys, dtype=np.uint64), np.array(values, dtype=np.uint64))

    remove = add

    def resized(self, size: str) -> TicTacTree:
        """This tree as a tree of ``size``, no larger: a segment is its key hashes' top bits,
        so each segment of the smaller tree is the XOR of a run of this one's. (Of its own
        size: this tree itself.)"""
        if SIZES[check_size(size)] > self.segments:
            raise InvalidArgumentError(f"a {self.size} tree cannot grow to {size}")
        if size == self.size:
            return self
        return TicTacTree(size, _xor_runs(self.leaves, SIZES[size]))

    def merge(self, other: TicTacTree) -> TicTacTree:
        """The tree of the union of two disjoint key sets."""
        self._same_size(other)
        return TicTacTree(self.size, self.leaves ^ other.leaves)

    def __eq__(self, other) -> bool:
        return (isinstance(other, TicTacTree) and self.size == other.size
                and bool(np.array_equal(self.leaves, other.leaves)))

    def __repr__(self) -> str:
        return f"TicTacTree({self.size!r}, dirty segments={int(np.count_nonzero(self.leaves))})"

    # -- exchanging --

    def root(self) -> bytes:
        """The branch hashes: each the XOR of its segments."""
        return _xor_runs(self.leaves, self.branches).astype("<u4").tobytes()

    def branch(self, index: int) -> bytes:
        """The segment hashes of branch ``index``."""
        return self.leaves[index * BRANCH_WIDTH:(index + 1) * BRANCH_WIDTH].astype(
            "<u4").tobytes()

    def encode(self) -> bytes:
        """The tree as bytes: its segments that are not zero while they are under a
        sixteenth (format 3), else compressed (format 2) unless that saves under an eighth,
        as for a full store's tree of random hashes (format 1: then a decode is one copy)."""
        head = self.size.encode().ljust(8, b"\0")
        if np.count_nonzero(self.leaves) * 16 <= self.segments:
            at = np.flatnonzero(self.leaves != 0)  # on bools: a third of the time
            body = at.astype("<u4").tobytes() + self.leaves[at].astype("<u4").tobytes()
            return bytes([SPARSE]) + head + lz4.block.compress(body)
        raw = self.leaves.astype("<u4", copy=False).tobytes()
        packed = lz4.block.compress(raw)
        form, body = (PACKED, packed) if len(packed) < len(raw) * 7 // 8 else (DENSE, raw)
        return bytes([form]) + head + body

    @classmethod
    def decode(cls, data: bytes) -> TicTacTree:
        if not data or data[0] not in (DENSE, PACKED, SPARSE):
            raise InvalidArgumentError("not a tictac tree of a known format")
        size = check_size(data[1:9].rstrip(b"\0").decode(errors="replace"))
        try:
            body = memoryview(data)[9:]
            if data[0] == SPARSE:
                leaves = _scattered(lz4.block.decompress(body), SIZES[size])
            elif data[0] == PACKED:  # a bytearray: the leaves use it as it is
                leaves = np.frombuffer(lz4.block.decompress(body, return_bytearray=True), "<u4")
            else:
                leaves = np.frombuffer(body, "<u4").copy()
            return cls(size, leaves)
        except (lz4.block.LZ4BlockError, ValueError):
            raise InvalidArgumentError(f"a damaged {size} tictac tree") from None

    def _same_size(self, other: TicTacTree) -> None:
        if other.size != self.size:
            raise InvalidArgumentError(f"trees of sizes {self.size} and {other.size} differ in "
                                       "shape: compare trees of one size")


def dirty_branches(root_a: bytes, root_b: bytes) -> list[int]:
    """The branches whose hashes differ between two roots."""
    return _differing(root_a, root_b)


def dirty_segments(branch: int, leaves_a: bytes, leaves_b: bytes) -> list[int]:
    """The segments of ``branch`` whose hashes differ."""
    return [branch * BRANCH_WIDTH + i for i in _differing(leaves_a, leaves_b)]


def _xor_runs(leaves: np.ndarray, count: int) -> np.ndarray:
    """``leaves`` XORed down to ``count`` hashes, each of a run of adjacent ones (a power of
    two). Numpy's reduce along runs under 64 costs twice to six times halving them pairwise,
    a pass over half as much each time."""
    if len(leaves) // count >= 64:
        return np.bitwise_xor.reduce(leaves.reshape(count, -1), axis=1)
    while len(leaves) > count:
        leaves = leaves[0::2] ^ leaves[1::2]
    return leaves


def _scattered(body: bytes, segments: int) -> np.ndarray:
    """The leaves of a format 3 body: ascending segment numbers, then their hashes."""
    half = len(body) // 2
    at, hashes = np.frombuffer(body[:half], "<u4"), np.frombuffer(body[half:], "<u4")
    if len(body) % 8 or (len(at) and (at[-1] >= segments or np.any(at[1:] <= at[:-1]))):
        raise ValueError("segment numbers out of order or of range")
    leaves = np.zeros(segments, dtype=np.uint32)
    leaves[at] = hashes
    return leaves


def _differing(a: bytes, b: bytes) -> list[int]:
    if len(a) != len(b):
        raise InvalidArgumentError("trees of different sizes cannot be compared")
    x, y = np.frombuffer(a, dtype="<u4"), np.frombuffer(b, dtype="<u4")
    return np.flatnonzero(x != y).tolist()
