"""leveled-ray: a key-value store on the design of leveled, with Ray actors over an object store.

>>> import leveled_ray as lr
>>> store = lr.open("file:///tmp/db")           # doctest: +SKIP
>>> store.put("users", "alice", b"...")         # doctest: +SKIP
"""

from .admin import Admin, admin, destroy, gc
from .api import Store, connect, open
from .clone import clone
from .codec import Delete, Head, Put
from .errors import (
    CheckpointNotFoundError,
    ConditionFailedError,
    CorruptObjectError,
    FencedError,
    InvalidArgumentError,
    LeveledError,
    ObjectStoreError,
    SnapshotExpiredError,
    StoreClosedError,
)
from .manifest.model import Checkpoint
from .options import Options
from .reader import Reader, reader
from .snapshot import Snapshot

__version__ = "0.1.0"

__all__ = [
    "Admin", "Checkpoint", "Reader", "admin", "clone", "destroy", "gc", "reader",
    "CheckpointNotFoundError", "ConditionFailedError", "CorruptObjectError", "Delete",
    "FencedError", "Head", "InvalidArgumentError", "LeveledError", "ObjectStoreError", "Options",
    "Put", "Snapshot", "SnapshotExpiredError", "Store", "StoreClosedError", "connect", "open",
]
