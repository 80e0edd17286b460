"""leveled-ray: a key-value store on the design of leveled, with Ray actors over an object store.

>>> import leveled_ray as lr
>>> store = lr.open("file:///tmp/db")           # doctest: +SKIP
>>> store.put("users", "alice", b"...")         # doctest: +SKIP
"""

from .admin.handle import Admin
from .client.reader import Reader
from .client.snapshot import Snapshot
from .client.spares import keep_spare_bookies, spare_stats
from .client.store import Store
from .client.transaction import Transaction
from .cluster.admin import ShardedAdmin
from .cluster.reader import ShardedReader
from .cluster.snapshot import ShardedSnapshot
from .cluster.store import ShardedStore
from .codec import Delete, Head, Put
from .entry_points import admin, clone, compare, connect, destroy, gc, open, reader
from .errors import (
    CheckpointNotFoundError,
    ConditionFailedError,
    ConflictError,
    CorruptObjectError,
    FencedError,
    HistoryUnavailableError,
    InvalidArgumentError,
    LeveledError,
    ObjectStoreError,
    SnapshotExpiredError,
    StoreClosedError,
    StoreUnavailableError,
    TransactionExpiredError,
    WrongShardError,
)
from .manifest.model import Checkpoint
from .options import (
    DiskCacheOptions,
    GcOptions,
    JournalOptions,
    LedgerOptions,
    ObjectStoreOptions,
    Options,
)

__version__ = "0.1.0"

__all__ = [
    "Admin", "Checkpoint", "Reader", "admin", "clone", "compare", "destroy", "gc", "reader",
    "CheckpointNotFoundError", "ConditionFailedError", "ConflictError", "CorruptObjectError",
    "Delete", "ShardedAdmin", "ShardedReader", "ShardedSnapshot", "ShardedStore",
    "FencedError", "Head", "HistoryUnavailableError", "InvalidArgumentError", "LeveledError",
    "ObjectStoreError", "Options",
    "DiskCacheOptions", "GcOptions", "JournalOptions", "LedgerOptions", "ObjectStoreOptions",
    "Put", "Snapshot", "SnapshotExpiredError", "Store", "StoreClosedError", "StoreUnavailableError",
    "Transaction", "TransactionExpiredError",
    "WrongShardError", "connect", "keep_spare_bookies", "open", "replicate", "spare_stats",
]


def __getattr__(name: str):
    # lr.data (Ray Data) is imported on first use: ray.data is heavy to import.
    if name == "data":
        from . import raydata

        return raydata
    if name == "replicate":  # lr.replicate: only the drivers that replicate import it
        from .replication import replicate

        return replicate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
