"""leveled-ray: a key-value store on the design of leveled, with Ray actors over an object store.

>>> import leveled_ray as lr
>>> store = lr.open("file:///tmp/db")           # doctest: +SKIP
>>> store.put("users", "alice", b"...")         # doctest: +SKIP
"""

from .api import Store, connect, open
from .codec import Delete, Head, Put
from .errors import (
    ConditionFailedError,
    CorruptObjectError,
    FencedError,
    InvalidArgumentError,
    LeveledError,
    ObjectStoreError,
    StoreClosedError,
)
from .options import Options

__version__ = "0.1.0"

__all__ = [
    "ConditionFailedError", "CorruptObjectError", "Delete", "FencedError", "Head",
    "InvalidArgumentError", "LeveledError", "ObjectStoreError", "Options", "Put", "Store",
    "StoreClosedError", "connect", "open",
]
