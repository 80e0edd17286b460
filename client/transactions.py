"""What a store offers for transactions (the :class:`~leveled_ray.roles.Transactions` role):
``transaction()``, and ``run_transaction``, FoundationDB's retry loop."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import ConflictError, InvalidArgumentError, LeveledError, StoreClosedError
from .transaction import SERIALIZABLE, Transaction

#: The first and the longest pause between two tries of ``run_transaction``.
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.002, 0.2
T = TypeVar("T")


def _backoff(tries: int) -> float:
    return random.uniform(0, min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** tries))


def _tries_again(t: Transaction, exc: LeveledError) -> bool:
    """Whether :func:`run_transaction` runs a transaction again after ``exc``: a conflict, or
    a store that was unreachable (a Bookie restarting, a shard split under it) before the
    transaction sent its writes. A commit whose answer was lost may have taken effect."""
    return isinstance(exc, ConflictError) or (isinstance(exc, StoreClosedError)
                                              and not t.commit_sent)


def _check_retries(retries) -> int:
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise InvalidArgumentError(f"retries must be an int >= 1, not {retries!r}")
    return retries


class Transactions:
    """The :class:`~leveled_ray.roles.Transactions` role, for plain and sharded stores alike:
    the store supplies ``_commit_changes_async(changes, values)``."""

    def transaction(self, isolation: str = SERIALIZABLE, *,
                    lifetime_s: float | None = None) -> Transaction:
        """A new :class:`Transaction`. ``isolation``: ``"serializable"`` (the default) or
        ``"snapshot"``; ``lifetime_s``: how long it may run, from now
        (``Options.transaction_lifetime_s`` by default). Cost: none until its first read
        (see :class:`Transaction` for each call's)."""
        return Transaction(self, isolation, lifetime_s)

    def run_transaction(self, fn: Callable[[Transaction], T], *, retries: int = 10,
                        isolation: str = SERIALIZABLE, lifetime_s: float | None = None) -> T:
        """Run ``fn(t)`` in a new transaction and commit it; returns what ``fn`` returned. On
        :class:`~leveled_ray.errors.ConflictError`, or on a
        :class:`~leveled_ray.errors.StoreClosedError` before the commit sent the writes (a
        Bookie restarting, a shard split meanwhile: nothing was written), run it again on a
        new transaction after a random pause (2 ms, doubling up to 0.2 s), up to
        ``retries`` tries in all, then raise the last error. Any other error, and a commit
        whose answer was lost (:class:`~leveled_ray.errors.StoreUnavailableError`: it may
        have taken effect), rolls back and is raised at once. Cost: each try's
        transaction's (see :class:`Transaction`)."""
        _check_retries(retries)
        for tries in range(retries):
            t = self.transaction(isolation, lifetime_s=lifetime_s)
            try:
                with t:
                    result = fn(t)
                return result
            except LeveledError as exc:
                if tries == retries - 1 or not _tries_again(t, exc):
                    raise
            time.sleep(_backoff(tries))
        raise AssertionError("unreachable")

    async def run_transaction_async(self, fn: Callable[[Transaction], Awaitable[T]], *,
                                    retries: int = 10, isolation: str = SERIALIZABLE,
                                    lifetime_s: float | None = None) -> T:
        """:meth:`run_transaction` with an async ``fn`` (it awaits the transaction's
        ``*_async`` calls). Cost: :meth:`run_transaction`'s."""
        _check_retries(retries)
        for tries in range(retries):
            t = self.transaction(isolation, lifetime_s=lifetime_s)
            try:
                async with t:
                    result = await fn(t)
                return result
            except LeveledError as exc:
                if tries == retries - 1 or not _tries_again(t, exc):
                    raise
            await asyncio.sleep(_backoff(tries))
        raise AssertionError("unreachable")
