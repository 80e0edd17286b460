"""Bloom filter of an SST's keys, built with numpy and probed with one 64-bit key hash.

Positions come from double hashing of xxh3-64 (Kirsch and Mitzenmacher): ``h1 + i*h2 mod m``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import xxhash

_MASK32 = 0xFFFFFFFF


def key_hash(key: bytes) -> int:
    return xxhash.xxh3_64_intdigest(key)


def key_hashes(keys) -> np.ndarray:
    """:func:`key_hash` of many keys, as ``uint64``."""
    digest = xxhash.xxh3_64_intdigest
    return np.fromiter((digest(k) for k in keys), dtype=np.uint64, count=len(keys))


class Bloom:
    """An immutable bloom filter: ``m`` bits, ``k`` probes."""

    __slots__ = ("bits", "m", "k", "_array")

    def __init__(self, bits: bytes, k: int):
        self.bits = bits
        self.m = len(bits) * 8
        self.k = k
        self._array: np.ndarray | None = None

    @classmethod
    def build(cls, keys: Iterable[bytes], count: int, bits_per_key: int) -> Bloom:
        m = max(64, ((count * bits_per_key + 7) // 8) * 8)
        k = max(1, min(16, round(bits_per_key * math.log(2))))
        hashes = np.fromiter((key_hash(key) for key in keys), dtype=np.uint64, count=count)
        h1 = hashes & np.uint64(_MASK32)
        h2 = (hashes >> np.uint64(32)) | np.uint64(1)
        marks = np.zeros(m, dtype=bool)
        for i in range(k):
            marks[((h1 + np.uint64(i) * h2) % np.uint64(m)).astype(np.int64)] = True
        return cls(np.packbits(marks, bitorder="little").tobytes(), k)

    def may_contain_hash(self, h: int) -> bool:
        h1 = h & _MASK32
        h2 = (h >> 32) | 1
        bits, m = self.bits, self.m
        for i in range(self.k):
            pos = (h1 + i * h2) % m
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True

    def may_contain_many(self, hashes: np.ndarray) -> np.ndarray:
        """:meth:`may_contain_hash` of many key hashes (``uint64``) at once, as a bool array."""
        if self._array is None:
            self._array = np.frombuffer(self.bits, dtype=np.uint8)
        h1 = hashes & np.uint64(_MASK32)
        h2 = (hashes >> np.uint64(32)) | np.uint64(1)
        m = np.uint64(self.m)
        found = np.ones(len(hashes), dtype=bool)
        for i in range(self.k):
            pos = (h1 + np.uint64(i) * h2) % m
            found &= ((self._array[pos >> np.uint64(3)] >> (pos & np.uint64(7)).astype(np.uint8))
                      & 1).astype(bool)
        return found

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(key_hash(key))

    @property
    def nbytes(self) -> int:
        return len(self.bits)
