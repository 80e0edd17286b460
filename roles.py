"""The roles a handle plays, each declared once: the calls it answers and their signatures.

Each role is a :class:`typing.Protocol`. A handle (``Store``, ``ShardedStore``,
``Snapshot``, ...) names the roles it plays among its bases, after the classes that implement
them, so that a call it lacks cannot go unnoticed: the role's declaration is abstract, and a
class that leaves one out cannot be instantiated.

Each role declares both forms of a call, ``name_async`` and its synchronous twin ``name`` (the
same call, answered without ``await``: its docstring is the async form's), so that a type
checker and an editor see every call a user can make on every handle. A handle
defines one of them (or a plan for both) and :func:`~leveled_ray.files.sync.with_sync_twins`
makes the other at run time with the same signature. Calls that do no I/O (``listen``,
``actors``, a reader's ``stats``) have a synchronous form only, and a handle's state
(``sqn``, ``manifest_id``) is a property.

``tests/client/test_roles.py`` checks that every handle answers every call of every role it
plays, with the role's signature, in both forms, and that each role declares the two forms
alike; ``make lint`` type-checks user scripts of every handle (``tests/typing/``) in strict
mode. SlateDB's ``DbReadOps`` / ``DbWriteOps``, shared by its database, reader and snapshot,
are the model.

Costs are stated per call in each handle's docstrings; "a round trip" is one Ray actor call
(about a millisecond), "a request" one object-store request.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from .codec.tictac import DEFAULT_SIZE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence

    import pyarrow as pa

    from .client.transaction import Transaction
    from .codec import Delete, Head, Put
    from .manifest.model import Checkpoint
    from .options import Options


T = TypeVar("T")

#: Calls whose async form takes an async function (its ``fn`` answers an awaitable) where the
#: sync form takes a plain one: their two forms differ in that argument's type alone.
AWAITS_ITS_FUNCTION = frozenset({"run_transaction"})


class Role(Protocol):
    """A set of calls that several handles answer alike."""


class KeyReads(Role, Protocol):
    """Reads by key: one object, or many in one call. Plain and sharded stores, snapshots and
    readers."""

    @abc.abstractmethod
    async def get_async(self, bucket, key) -> bytes | None:
        """The value of ``(bucket, key)``, or ``None``."""

    @abc.abstractmethod
    def get(self, bucket, key) -> bytes | None: ...

    @abc.abstractmethod
    async def head_async(self, bucket, key) -> Head | None:
        """The object's :class:`~leveled_ray.codec.Head` without its value, or ``None``."""

    @abc.abstractmethod
    def head(self, bucket, key) -> Head | None: ...

    @abc.abstractmethod
    async def get_many_async(self, pairs: Iterable[Sequence]) -> list[bytes | None]:
        """The values of many ``(bucket, key)`` pairs, ``None`` where absent."""

    @abc.abstractmethod
    def get_many(self, pairs: Iterable[Sequence]) -> list[bytes | None]: ...

    @abc.abstractmethod
    async def head_many_async(self, pairs: Iterable[Sequence]) -> list[Head | None]:
        """The heads of many ``(bucket, key)`` pairs, ``None`` where absent."""

    @abc.abstractmethod
    def head_many(self, pairs: Iterable[Sequence]) -> list[Head | None]: ...


class Queries(Role, Protocol):
    """Folds over key ranges, index queries and bucket listing, each over one point in time.
    Plain and sharded stores, snapshots and readers."""

    @abc.abstractmethod
    def fold_keys_async(self, bucket=None, start=None, end=None, *,
                        batch_size: int = 1000) -> AsyncIterator[tuple]:
        """``(bucket, key)`` of every live object in the range, in key order."""

    @abc.abstractmethod
    def fold_keys(self, bucket=None, start=None, end=None, *,
                  batch_size: int = 1000) -> Iterator[tuple]: ...

    @abc.abstractmethod
    def fold_keys_batches_async(self, bucket=None, start=None, end=None, *,
                                batch_size: int = 1000,
                                binary_names: bool = False) -> AsyncIterator[pa.RecordBatch]:
        """``fold_keys`` as Arrow batches."""

    @abc.abstractmethod
    def fold_keys_batches(self, bucket=None, start=None, end=None, *,
                          batch_size: int = 1000,
                          binary_names: bool = False) -> Iterator[pa.RecordBatch]: ...

    @abc.abstractmethod
    def fold_heads_async(self, bucket=None, start=None, end=None, *,
                         batch_size: int = 1000) -> AsyncIterator[tuple]:
        """``(bucket, key, Head)`` of every live object in the range, in key order."""

    @abc.abstractmethod
    def fold_heads(self, bucket=None, start=None, end=None, *,
                   batch_size: int = 1000) -> Iterator[tuple]: ...

    @abc.abstractmethod
    def fold_heads_batches_async(self, bucket=None, start=None, end=None, *,
                                 batch_size: int = 1000, binary_names: bool = False,
                                 segments=None, tree_size: str = DEFAULT_SIZE
                                 ) -> AsyncIterator[pa.RecordBatch]:
        """``fold_heads`` as Arrow batches; ``segments``: only the keys of those tictac
        segments of a ``tree_size`` tree."""

    @abc.abstractmethod
    def fold_heads_batches(self, bucket=None, start=None, end=None, *,
                           batch_size: int = 1000, binary_names: bool = False,
                           segments=None, tree_size: str = DEFAULT_SIZE
                           ) -> Iterator[pa.RecordBatch]: ...

    @abc.abstractmethod
    def fold_objects_async(self, bucket=None, start=None, end=None, *, order: str = "key",
                           batch_size: int = 1000) -> AsyncIterator[tuple]:
        """``(bucket, key, value)`` of every live object in the range."""

    @abc.abstractmethod
    def fold_objects(self, bucket=None, start=None, end=None, *, order: str = "key",
                     batch_size: int = 1000) -> Iterator[tuple]: ...

    @abc.abstractmethod
    def fold_objects_batches_async(self, bucket=None, start=None, end=None, *,
                                   order: str = "key", batch_size: int = 1000,
                                   binary_names: bool = False, with_indexes: bool = False
                                   ) -> AsyncIterator[pa.RecordBatch]:
        """``fold_objects`` as Arrow batches."""

    @abc.abstractmethod
    def fold_objects_batches(self, bucket=None, start=None, end=None, *,
                             order: str = "key", batch_size: int = 1000,
                             binary_names: bool = False, with_indexes: bool = False
                             ) -> Iterator[pa.RecordBatch]: ...

    @abc.abstractmethod
    def index_query_async(self, bucket, field: str, start, end, *, return_terms: bool = False,
                          term_regex=None, start_key=None,
                          max_results: int | None = None) -> AsyncIterator:
        """The keys (or ``(term, key)`` pairs) whose ``field`` index term is in the range."""

    @abc.abstractmethod
    def index_query(self, bucket, field: str, start, end, *, return_terms: bool = False,
                    term_regex=None, start_key=None,
                    max_results: int | None = None) -> Iterator[Any]: ...

    @abc.abstractmethod
    async def list_buckets_async(self) -> list:
        """Every bucket that holds a live object, in key order."""

    @abc.abstractmethod
    def list_buckets(self) -> list: ...

    @abc.abstractmethod
    async def is_empty_async(self) -> bool:
        """Whether no live object exists."""

    @abc.abstractmethod
    def is_empty(self) -> bool: ...

    @abc.abstractmethod
    async def kept_tree_async(self, size: str = DEFAULT_SIZE):
        """The tictac tree of ``size`` from the one the store keeps, without a fold; ``None``
        where a compare must fold."""

    @abc.abstractmethod
    def kept_tree(self, size: str = DEFAULT_SIZE): ...


class History(Role, Protocol):
    """The change feed of the history window, by SQN. Every handle."""

    @abc.abstractmethod
    def changes_async(self, after: int = 0, until: int | None = None, *, values: bool = True,
                      batch_size: int = 1000) -> AsyncIterator:
        """Every change after SQN ``after`` (up to ``until``), in SQN order."""

    @abc.abstractmethod
    def changes(self, after: int = 0, until: int | None = None, *, values: bool = True,
                batch_size: int = 1000) -> Iterator[Any]: ...

    @abc.abstractmethod
    def changes_batches_async(self, after: int = 0, until: int | None = None, *,
                              values: bool = True, batch_size: int = 1000,
                              binary_names: bool = False) -> AsyncIterator[pa.RecordBatch]:
        """``changes`` as Arrow batches."""

    @abc.abstractmethod
    def changes_batches(self, after: int = 0, until: int | None = None, *,
                        values: bool = True, batch_size: int = 1000,
                        binary_names: bool = False) -> Iterator[pa.RecordBatch]: ...


class Writes(Role, Protocol):
    """Puts and deletes, one at a time or as an atomic group. Plain and sharded stores."""

    @abc.abstractmethod
    async def put_async(self, bucket, key, value: bytes, *, indexes=(),
                        ttl: float | None = None, metadata: dict | None = None,
                        if_sqn: int | None = None, if_absent: bool = False) -> int:
        """Write ``value`` under ``(bucket, key)``; its SQN once durable."""

    @abc.abstractmethod
    def put(self, bucket, key, value: bytes, *, indexes=(),
            ttl: float | None = None, metadata: dict | None = None,
            if_sqn: int | None = None, if_absent: bool = False) -> int: ...

    @abc.abstractmethod
    async def delete_async(self, bucket, key, *, indexes=(), if_sqn: int | None = None) -> int:
        """Delete ``(bucket, key)``; the tombstone's SQN once durable."""

    @abc.abstractmethod
    def delete(self, bucket, key, *, indexes=(), if_sqn: int | None = None) -> int: ...

    @abc.abstractmethod
    async def put_many_async(self, items: Iterable[Put | Delete]) -> list[int]:
        """Write many changes as one atomic group; their SQNs."""

    @abc.abstractmethod
    def put_many(self, items: Iterable[Put | Delete]) -> list[int]: ...


class PointsInTime(Role, Protocol):
    """Views of the store as of now or of a past moment. Plain and sharded stores."""

    @abc.abstractmethod
    async def snapshot_async(self, long_running: bool = False, *, values: bool = True,
                             timeout_s: float | None = None, at_sqn=None,
                             at_time: float | None = None) -> SnapshotView:
        """A snapshot: the store as of now, or as of ``at_sqn`` / ``at_time``."""

    @abc.abstractmethod
    def snapshot(self, long_running: bool = False, *, values: bool = True,
                 timeout_s: float | None = None, at_sqn=None,
                 at_time: float | None = None) -> SnapshotView: ...

    @abc.abstractmethod
    async def checkpoint_async(self, lifetime: float | None = None, name: str | None = None,
                               source: str | None = None, *,
                               checkpoint_id: str | None = None) -> Checkpoint:
        """A durable checkpoint of the store as of now."""

    @abc.abstractmethod
    def checkpoint(self, lifetime: float | None = None, name: str | None = None,
                   source: str | None = None, *,
                   checkpoint_id: str | None = None) -> Checkpoint: ...


class Transactions(Role, Protocol):
    """Read-write transactions, ``snapshot`` or ``serializable`` (see
    :mod:`leveled_ray.client.transaction`). Plain and sharded stores."""

    @abc.abstractmethod
    def transaction(self, isolation: str = "serializable", *,
                    lifetime_s: float | None = None) -> Transaction:
        """A new transaction (no I/O until its first read)."""

    @abc.abstractmethod
    def run_transaction(self, fn: Callable[[Transaction], T], *, retries: int = 10,
                        isolation: str = "serializable", lifetime_s: float | None = None) -> T:
        """``fn(t)`` in a new transaction, committed; run again on a conflict."""

    @abc.abstractmethod
    async def run_transaction_async(self, fn: Callable[[Transaction], Awaitable[T]], *,
                                    retries: int = 10, isolation: str = "serializable",
                                    lifetime_s: float | None = None) -> T:
        """:meth:`run_transaction` with an async ``fn``."""


class Checkpoints(Role, Protocol):
    """The checkpoints a store keeps. Plain and sharded stores and their admins."""

    @abc.abstractmethod
    async def list_checkpoints_async(self) -> list[Checkpoint]:
        """The live checkpoints."""

    @abc.abstractmethod
    def list_checkpoints(self) -> list[Checkpoint]: ...

    @abc.abstractmethod
    async def refresh_checkpoint_async(self, checkpoint_id: str,
                                       lifetime: float | None = None) -> Checkpoint:
        """Expire the checkpoint ``lifetime`` seconds from now (``None``: never)."""

    @abc.abstractmethod
    def refresh_checkpoint(self, checkpoint_id: str,
                           lifetime: float | None = None) -> Checkpoint: ...

    @abc.abstractmethod
    async def delete_checkpoint_async(self, checkpoint_id: str) -> None:
        """Delete a checkpoint."""

    @abc.abstractmethod
    def delete_checkpoint(self, checkpoint_id: str) -> None: ...


class HistoryLeases(Role, Protocol):
    """Live subscriptions and the leases that keep history from compaction. Plain and sharded
    stores."""

    @abc.abstractmethod
    def listen(self, after=0, *, name: str | None = None, lifetime: float = 60.0,
               values: bool = True, batch_size: int = 1000):
        """A live subscription to every change after ``after`` (an iterator and an async
        iterator)."""

    @abc.abstractmethod
    async def set_history_lease_async(self, name: str, position, lifetime: float):
        """Hold every change after ``position`` from compaction for ``lifetime`` seconds."""

    @abc.abstractmethod
    def set_history_lease(self, name: str, position, lifetime: float): ...

    @abc.abstractmethod
    async def drop_history_lease_async(self, name: str) -> None:
        """Let go of lease ``name``."""

    @abc.abstractmethod
    def drop_history_lease(self, name: str) -> None: ...

    @abc.abstractmethod
    async def list_history_leases_async(self):
        """The live history leases."""

    @abc.abstractmethod
    def list_history_leases(self): ...


class Backups(Role, Protocol):
    """Incremental hot backups. Plain and sharded stores and their admins."""

    @abc.abstractmethod
    async def backup_async(self, target_url: str, *, target_options: Options | None = None,
                           progress: bool | Callable[[int, int], None] = True) -> dict:
        """Incremental hot backup to ``target_url``."""

    @abc.abstractmethod
    def backup(self, target_url: str, *, target_options: Options | None = None,
               progress: bool | Callable[[int, int], None] = True) -> dict: ...


class Maintenance(Role, Protocol):
    """A running store's counters, compaction and close. Plain and sharded stores."""

    @abc.abstractmethod
    def actors(self) -> list:
        """The store's Ray actors (no I/O)."""

    @abc.abstractmethod
    async def stats_async(self) -> dict:
        """The store's counters."""

    @abc.abstractmethod
    def stats(self) -> dict: ...

    @abc.abstractmethod
    async def compact_journal_async(self, wait: bool = False):
        """Start a journal compaction now (and wait for it with ``wait=True``)."""

    @abc.abstractmethod
    def compact_journal(self, wait: bool = False): ...

    @abc.abstractmethod
    async def trim_journal_async(self):
        """head_only stores: delete the journal files the Ledger holds now."""

    @abc.abstractmethod
    def trim_journal(self): ...

    @abc.abstractmethod
    async def close_async(self) -> None:
        """Finish writes and stop the store's actors; closing twice is harmless."""

    @abc.abstractmethod
    def close(self) -> None: ...


class View(Role, Protocol):
    """A point in time that a snapshot holds. Plain and sharded snapshots."""

    @property
    @abc.abstractmethod
    def sqn(self):
        """The view's position (no I/O)."""

    @abc.abstractmethod
    async def go_back_async(self, at_sqn=None, at_time: float | None = None) -> SnapshotView:
        """A view of an earlier moment of the same history."""

    @abc.abstractmethod
    def go_back(self, at_sqn=None, at_time: float | None = None) -> SnapshotView: ...

    @abc.abstractmethod
    async def release_async(self) -> None:
        """Let the store free what only this view needed."""

    @abc.abstractmethod
    def release(self) -> None: ...


class SnapshotView(KeyReads, Queries, History, View, Protocol):
    """A snapshot, plain or sharded, as ``snapshot()`` and ``go_back()`` answer it: a point in
    time that reads go on from while writes land, released when its ``with`` block ends."""

    @abc.abstractmethod
    def __enter__(self) -> Self:
        """The snapshot itself."""

    @abc.abstractmethod
    def __exit__(self, *exc: object) -> None:
        """Releases the snapshot."""
