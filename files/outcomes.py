"""Pure rules for object-store requests that fail: which failures to retry, how long to wait,
and how a create-if-absent learns its own outcome (persist's definite and indefinite errors).

A failed attempt is one of the :class:`Failure` kinds. A create whose attempt may have reached
the store (a timeout, a lost reply, a 5xx) is *resolved* by reading back the object's identity
bytes (a write token in its header) and comparing them with its own: an "already exists"
answer to our own retried request is then our success, never a lost race. The I/O is passed
in, so these rules are tested without any store.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass


class Failure(enum.Enum):
    MISSING = "missing"  # no such object: an answer, not an error
    EXISTS = "exists"  # create-if-absent found an object there: an answer
    DENIED = "denied"  # credentials or permissions: retrying will not help
    REJECTED = "rejected"  # the store refused the request as malformed: nothing happened
    NOT_SENT = "not sent"  # the request never reached the store (no connection)
    UNKNOWN = "unknown"  # transient, and a write may or may not have been applied
    #: a read past the object's end: every object is immutable and read at offsets its own
    #: footer or the manifest gave, so it is shorter than written (damaged), not busy
    SHORT = "short"


#: Failures worth another attempt.
TRANSIENT = frozenset({Failure.NOT_SENT, Failure.UNKNOWN})


class AttemptError(Exception):
    """One attempt failed; ``failure`` says how, ``cause`` is the client's own error."""

    def __init__(self, failure: Failure, cause: BaseException | None = None):
        super().__init__(f"{failure.value}: {cause}")
        self.failure = failure
        self.cause = cause


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most ``max_retries`` more attempts, none started after
    ``timeout_s`` from the first, with full-jitter exponential backoff between them."""

    max_retries: int = 10
    timeout_s: float = 30.0
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """Seconds to wait before each retry (AWS's "full jitter")."""
        draw = (rng or random).uniform
        ceiling = self.backoff_s
        while True:
            yield draw(0.0, ceiling) if ceiling else 0.0
            ceiling = min(self.max_backoff_s, max(ceiling, 0.001) * 2)


async def retry(attempt: Callable[[], Awaitable], policy: RetryPolicy, *,
                on_retry: Callable[[AttemptError], None] | None = None,
                clock: Callable[[], float] | None = None, sleep=asyncio.sleep):
    """``await attempt()`` until it succeeds, raises a non-transient :class:`AttemptError`,
    or the policy's count or time runs out (then the last error is raised). ``on_retry`` is
    told of each failure that is retried. ``clock`` defaults to ``time.monotonic``, looked
    up at each call (a simulation replaces it)."""
    clock = clock or time.monotonic
    deadline = clock() + policy.timeout_s
    delays = policy.delays()
    for n in range(policy.max_retries + 1):
        try:
            return await attempt()
        except AttemptError as exc:
            delay = next(delays)
            if (exc.failure not in TRANSIENT or n == policy.max_retries
                    or clock() + delay > deadline):
                raise
            if on_retry is not None:
                on_retry(exc)
            await sleep(delay)
    raise AssertionError("unreachable")


class Latencies:
    """Recent request latencies, for choosing when to hedge: a copy of a request is sent once
    it has taken ``factor`` times the recent 95th percentile (Dean and Barroso's hedged
    requests), within ``[floor, ceiling]`` seconds. So only a few percent of requests are
    ever sent twice."""

    def __init__(self, floor: float, ceiling: float, factor: float = 2.0, size: int = 256):
        self.floor, self.ceiling, self.factor = floor, max(floor, ceiling), factor
        self.samples: collections.deque[float] = collections.deque(maxlen=size)
        self._hedge_after = ceiling
        self._fresh = 0

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        self._fresh += 1
        if self._fresh >= 16:  # recompute now and then, not on every request
            self._fresh = 0
            p95 = sorted(self.samples)[int(0.95 * (len(self.samples) - 1))]
            self._hedge_after = min(self.ceiling, max(self.floor, self.factor * p95))

    @property
    def hedge_after(self) -> float:
        return self._hedge_after


async def hedged(call: Callable[[], Awaitable], after: float):
    """``await call()``, and if it has not answered within ``after`` seconds, a second
    ``call()`` beside it: the first success wins, and so does the first failure that is not
    transient (an answer such as "missing" or "exists"). Safe only for requests that may be
    applied twice: reads, and creates whose outcome is resolved (see :func:`settle_create`).
    Returns ``(result, hedged)``."""
    copies = [asyncio.ensure_future(call())]
    try:
        done, _ = await asyncio.wait(copies, timeout=after)
        if done:
            return copies[0].result(), False
        copies.append(asyncio.ensure_future(call()))
        pending = set(copies)
        error: BaseException | None = None
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is None:
                    return task.result(), True
                if not (isinstance(exc, AttemptError) and exc.failure in TRANSIENT):
                    raise exc
                error = exc
        raise error
    finally:  # (the caller's cancellation too)
        for task in copies:  # a losing copy's outcome is no one's: not an unretrieved error
            if task.done():  # most requests: no callback, no step of the loop for it
                _retrieved(task)
            else:
                task.add_done_callback(_retrieved)
                task.cancel()


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


class Created(enum.Enum):
    MINE = "mine"  # the object there is the one this writer wrote
    THEIRS = "theirs"  # another writer's object holds the name
    SEALED = "sealed"  # this writer's seal holds it: its write never landed, and never will


class Unsettled(Exception):
    """The create's outcome is not known yet. ``maybe_applied`` is false when no attempt can
    have reached the store (then it surely did not happen)."""

    def __init__(self, maybe_applied: bool, cause: BaseException | None):
        super().__init__(f"outcome unknown (may have been applied: {maybe_applied}): {cause}")
        self.maybe_applied = maybe_applied
        self.cause = cause


async def settle_create(send: Callable[[], Awaitable[None]],
                        read_back: Callable[[], Awaitable[bytes | None]], mine: bytes,
                        policy: RetryPolicy, budget_s: float, *,
                        on_retry: Callable[[AttemptError], None] | None = None,
                        clock: Callable[[], float] | None = None,
                        sleep=asyncio.sleep) -> tuple[Created, bytes | None]:
    """Create an object and learn for sure whether this writer's bytes hold the name.

    ``send()`` makes one create-if-absent attempt: it returns when the object was created and
    raises :class:`AttemptError` otherwise (``EXISTS`` when the name is taken). ``read_back()``
    returns the identity bytes of the object now there (``None`` if there is none), which are
    compared with ``mine``. The same bytes are resent until the outcome is known, or until
    ``budget_s`` has passed or ``policy.max_retries`` resends were made; then
    :class:`Unsettled` is raised.

    Returns ``(MINE, None)`` or ``(THEIRS, their identity bytes)``. An "exists" answer is always
    checked: after a lost reply, it may be our own earlier attempt. A name that was taken and
    is gone by the time it is read is someone else's (``b""``): a deleted name is never reused.
    """
    clock = clock or time.monotonic
    deadline = clock() + budget_s
    delays = policy.delays()
    maybe_applied = False
    last: BaseException | None = None
    for sends in itertools.count(1):
        try:
            await send()
            return Created.MINE, None
        except AttemptError as exc:
            last, answer = exc.cause or exc, exc.failure
        if answer is Failure.UNKNOWN:
            maybe_applied = True
        elif answer not in (Failure.EXISTS, Failure.NOT_SENT):  # denied, rejected: no healing
            raise Unsettled(maybe_applied, last)
        if answer is not Failure.NOT_SENT:
            try:
                theirs = await read_back()
            except AttemptError as exc:
                last = exc.cause or exc
            else:
                if theirs == mine:
                    return Created.MINE, None
                if theirs is not None:
                    return Created.THEIRS, theirs
                if answer is Failure.EXISTS:  # taken, then deleted: not ours to reuse
                    return Created.THEIRS, b""
                # Nothing there: our attempt did not land (yet). Send it again.
        delay = next(delays)
        if sends > policy.max_retries or clock() + delay > deadline:
            raise Unsettled(maybe_applied, last)
        if on_retry is not None:
            on_retry(AttemptError(Failure.UNKNOWN if maybe_applied else Failure.NOT_SENT, last))
        await sleep(delay)
    raise AssertionError("unreachable")
