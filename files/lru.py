"""A least-recently-used cache with a byte budget, shared by the file clerks of one process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class LruCache:
    """Least-recently-used cache with a byte budget (the budget may be 0: cache nothing).
    Thread-safe: readers in one process may share it across threads."""

    def __init__(self, budget: int):
        self.budget = budget
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return item[0]

    def __contains__(self, key) -> bool:
        """Whether ``key`` is held: a look that is not a use (no count, no reordering)."""
        with self._lock:
            return key in self._items

    def get_many(self, keys, count_misses: bool = True) -> list:
        """:meth:`get` of many keys, under one lock. ``count_misses=False`` leaves the misses
        to a :meth:`get` that follows."""
        with self._lock:
            items = self._items
            out = []
            for key in keys:
                item = items.get(key)
                if item is None:
                    out.append(None)
                else:
                    items.move_to_end(key)
                    out.append(item[0])
            hits = len(out) - out.count(None)
            self.hits += hits
            if count_misses:
                self.misses += len(out) - hits
            return out

    def put(self, key, value, nbytes: int) -> None:
        if nbytes > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._items[key] = (value, nbytes)
            self.used += nbytes
            while self.used > self.budget:
                _, (_, size) = self._items.popitem(last=False)
                self.used -= size

    def drop_prefix(self, name: str) -> None:
        """Forget everything cached for one file (after it is deleted)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == name]:
                self.used -= self._items.pop(key)[1]

    def held_keys(self) -> list:
        """The keys held, the least recently used first (a copy)."""
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        return len(self._items)
