"""Typed errors of leveled-ray.

Every error a caller can act on is a subclass of :class:`LeveledError`. Errors raised inside the
store's actors reach the caller as these types (the client handle unwraps Ray's wrapper
exceptions). A call rejected with an error changes nothing in the store, except where an
:class:`ObjectStoreError` says ``definite=False``, and a :class:`StoreUnavailableError` (the
Bookie was lost during the call): then the change may or may not have happened.
"""

from __future__ import annotations


class LeveledError(Exception):
    """Base class of every leveled-ray error."""

    def __reduce__(self):
        # Errors cross Ray process boundaries: rebuild them from their constructor arguments.
        return (self.__class__, self._args())

    def _args(self) -> tuple:
        return self.args


class InvalidArgumentError(LeveledError, ValueError):
    """A call was used wrongly: a wrong type, an empty bucket or key, a value too large.

    Nothing was changed.
    """


class StoreClosedError(LeveledError):
    """The store was closed, or its actors are gone; open it again to continue. (An object
    store that fails never closes the store: see :class:`ObjectStoreError`.)"""


class StoreUnavailableError(StoreClosedError):
    """The store's Bookie was lost while this call ran (its process or its node died, or it
    could not be reached), and Ray is restarting it (failover, ``Options.max_restarts``).

    The call's outcome is unknown, as an indefinite ``ObjectStoreError``'s: a write may or may
    not have happened (``definite`` is always ``False``); read it back to know. Nothing else
    is needed: the restarted Bookie reopens the store by itself, and calls on the same handle
    succeed once it is back (a write sent while Ray starts its new process gets this error
    too). Reads are sent again by the client, and raise this only if the Bookie is not back
    within a minute. (A subclass of :class:`StoreClosedError`, which it was before
    failover.)"""

    definite = False


class WrongShardError(LeveledError):
    """A key reached a shard that does not own it: the caller's shard map is older than a
    split. Nothing was changed; a sharded store's handle reads the newest shard map and sends
    the call again by itself."""


class SnapshotExpiredError(LeveledError):
    """A snapshot (or reader) was read after its release or its timeout: the files it reads
    may be gone. Take a new one."""


class CheckpointNotFoundError(LeveledError):
    """No live checkpoint has that id (it never existed, was deleted, or expired)."""


class HistoryUnavailableError(LeveledError):
    """The changes after SQN ``after`` (or the store as it was then) are no longer all in the
    Journal: compaction dropped some. History now begins after SQN ``history_sqn``.

    To catch up, read the store at a point in time (a snapshot, or a checkpoint's reader),
    then read its changes from that snapshot's SQN on. Hold a lease (``listen``, or a named
    consumer) or set ``Options.history_s`` so that history is kept for you.
    """

    def __init__(self, after: int, history_sqn: int):
        super().__init__(f"history after SQN {after} is gone: it now begins after SQN "
                         f"{history_sqn}; restart from a snapshot (its SQN is a position)")
        self.after = after
        self.history_sqn = history_sqn

    def _args(self) -> tuple:
        return (self.after, self.history_sqn)


class FencedError(LeveledError):
    """Another writer opened the store with a newer writer epoch.

    This writer can no longer change the store: none of the writes that raised this are visible.
    """

    def __init__(self, message: str, *, epoch: int = 0, current_epoch: int = 0):
        super().__init__(message)
        self.epoch = epoch
        self.current_epoch = current_epoch

    def _args(self) -> tuple:
        return (self.args[0],)

    def again(self) -> FencedError:
        """A fresh copy, for each later call that the same fencing refuses."""
        return FencedError(self.args[0], epoch=self.epoch, current_epoch=self.current_epoch)

    def __reduce__(self):
        return (_rebuild_fenced, (self.args[0], self.epoch, self.current_epoch))


def _rebuild_fenced(message: str, epoch: int, current_epoch: int) -> FencedError:
    return FencedError(message, epoch=epoch, current_epoch=current_epoch)


class ConditionFailedError(LeveledError):
    """A conditional change (``if_sqn`` or ``if_absent``) found another state; nothing was written.

    ``failures`` lists ``(bucket, key, expected, actual)`` for each condition that failed, where
    ``expected`` is the SQN asked for (``None`` for ``if_absent``) and ``actual`` the current SQN
    (``None`` when the key is absent).
    """

    def __init__(self, message: str, failures: tuple = ()):
        super().__init__(message)
        self.failures = tuple(failures)

    def _args(self) -> tuple:
        return (self.args[0], self.failures)


class ConflictError(LeveledError):
    """Nothing was written; retry it. A transaction found a key it depends on changed since
    its snapshot, or held by another batch; or a cross-shard ``put_many`` met other batches
    holding some of its keys until its time ran out (``txn_timeout_s``), or a shard decided
    it aborted."""


class TransactionExpiredError(ConflictError):
    """A transaction was read or committed after its lifetime (``lifetime_s``); nothing was
    written. Run it again."""


class CorruptObjectError(LeveledError):
    """An object in the store failed validation (magic, version, length or checksum).

    ``path`` is the object's name, ``offset`` the byte offset where the problem was found.
    Decoders raise this instead of returning wrong data.
    """

    def __init__(self, path: str, offset: int, reason: str):
        super().__init__(f"corrupt object {path!r} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason

    def _args(self) -> tuple:
        return (self.path, self.offset, self.reason)


class ObjectStoreError(LeveledError):
    """The object store failed a request, after its retries.

    ``definite`` follows Materialize persist's two tiers. ``True``: the operation was never
    applied and never will be (a write of unknown outcome is settled, or its name sealed,
    before this is raised), so retrying is safe. ``False``: it may or may not have happened;
    raised only when the store stayed unreachable even for the seal. The store stays open and
    settles it before it writes anything else.
    """

    def __init__(self, message: str, *, definite: bool, path: str | None = None):
        super().__init__(message)
        self.definite = definite
        self.path = path

    def __reduce__(self):
        return (_rebuild_store_error, (self.args[0], self.definite, self.path))


def _rebuild_store_error(message: str, definite: bool, path: str | None) -> ObjectStoreError:
    return ObjectStoreError(message, definite=definite, path=path)


__all__ = [
    "LeveledError",
    "InvalidArgumentError",
    "StoreClosedError",
    "StoreUnavailableError",
    "FencedError",
    "SnapshotExpiredError",
    "CheckpointNotFoundError",
    "ConditionFailedError",
    "CorruptObjectError",
    "ObjectStoreError",
    "WrongShardError",
]
