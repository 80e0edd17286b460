"""The locks a Bookie's writes wait for: the keys of prepared cross-shard parts, and the key
ranges a transaction checks (see :mod:`.participant` and :mod:`.write_path`)."""

from __future__ import annotations

import asyncio


class KeyLocks:
    """Locked keys and ranges, each held by one batch. Its state lives on the
    :class:`~.write_path.WritePath` that plays it: ``locks`` (key -> batch), ``range_locks``
    (batch -> its ``[lo, hi)`` ranges) and the ``_unlocked`` event."""

    locks: dict[bytes, str]
    range_locks: dict[str, list[tuple[bytes, bytes]]]
    _unlocked: asyncio.Event


    @property
    def locking(self) -> bool:
        """Whether any key or range is locked."""
        return bool(self.locks or self.range_locks)

    def locked(self, lkeys, txn: str | None = None) -> bool:
        """Whether a batch other than ``txn`` holds any of ``lkeys``, or a range one is in."""
        locks = self.locks
        if locks and any(locks.get(k, txn) != txn for k in lkeys):
            return True
        return bool(self.range_locks) and any(
            lo <= k < hi for t, ranges in self.range_locks.items() if t != txn
            for lo, hi in ranges for k in lkeys)

    async def wait_unlocked(self, lkeys, txn: str | None = None, refused=lambda: None) -> None:
        """Wait until no batch other than ``txn`` holds any of ``lkeys``; ``refused()``
        raises to stop waiting (a write's :meth:`check_usable`)."""
        while self.locked(lkeys, txn):
            refused()
            await self._unlocked.wait()

    def locked_in(self, ssts) -> list[bytes]:
        """The locked keys that fall in the key range of one of ``ssts`` (a bulk write's):
        its install waits for their batches, whose conditions were checked when they were
        prepared and must still hold when they are applied."""
        if not self.locking:
            return []
        ranges = [(s.min_key, s.max_key) for s in ssts]
        held = [k for k in self.locks if any(lo <= k <= hi for lo, hi in ranges)]
        return held + [lo for checked in self.range_locks.values() for lo, hi in checked
                       if any(lo <= top and low < hi for low, top in ranges)]

    def lock(self, lkeys, txn: str, ranges=()) -> bool:
        """Lock ``lkeys`` and key ranges ``[lo, hi)`` for ``txn``, all or none: ``False`` if
        another batch holds one of the keys or a key in one of the ranges."""
        if self.locked(lkeys, txn) or any(
                lo <= k < hi for k, t in self.locks.items() if t != txn for lo, hi in ranges):
            return False
        self.locks.update((k, txn) for k in lkeys)
        if ranges:
            self.range_locks[txn] = list(ranges)
        return True

    def unlock(self, txn: str) -> None:
        """Release ``txn``'s keys and ranges, and wake whoever waits for a key."""
        self.locks = {k: t for k, t in self.locks.items() if t != txn}
        self.range_locks.pop(txn, None)
        woken, self._unlocked = self._unlocked, asyncio.Event()
        woken.set()
