"""The roles of the handles that follow or administer a store, and of a sharded store's
reshaping (see :mod:`leveled_ray.roles`, which declares the others alike)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Protocol

from .roles import Role

if TYPE_CHECKING:
    from .manifest.model import Checkpoint
    from .manifest.shard_map import ShardMap


class Splits(Role, Protocol):
    """Splitting a shard in two by reference. Sharded stores (through the running store) and
    their admins (at rest)."""

    @abc.abstractmethod
    async def split_shard_async(self, shard: int) -> ShardMap:
        """Split shard ``shard``; the new shard map."""

    @abc.abstractmethod
    def split_shard(self, shard: int) -> ShardMap: ...


class Following(Role, Protocol):
    """A read-only view that follows a running store (or stays on a checkpoint). Plain and
    sharded readers."""

    @abc.abstractmethod
    def stats(self) -> dict:
        """The reader's counters (no I/O)."""

    @property
    @abc.abstractmethod
    def manifest_id(self):
        """The manifest version the reader reads (no I/O)."""

    @property
    @abc.abstractmethod
    def renew_failures(self) -> int:
        """How many renewals of the reader's lease failed in a row (no I/O)."""

    @abc.abstractmethod
    async def refresh_async(self) -> None:
        """Move to the store's newest version now."""

    @abc.abstractmethod
    def refresh(self) -> None: ...

    @abc.abstractmethod
    async def close_async(self) -> None:
        """Stop following and let go of what the reader holds."""

    @abc.abstractmethod
    def close(self) -> None: ...


class Administration(Role, Protocol):
    """Work on a store's objects, running or not, without Ray. Plain and sharded admins."""

    @abc.abstractmethod
    async def create_checkpoint_async(self, lifetime: float | None = None,
                                      name: str | None = None, source: str | None = None, *,
                                      checkpoint_id: str | None = None) -> Checkpoint:
        """A durable checkpoint of the store's newest version."""

    @abc.abstractmethod
    def create_checkpoint(self, lifetime: float | None = None,
                          name: str | None = None, source: str | None = None, *,
                          checkpoint_id: str | None = None) -> Checkpoint: ...

    @abc.abstractmethod
    async def gc_async(self, min_age: float | None = None, dry_run: bool = False,
                       progress=None):
        """One garbage-collection pass over the store's objects."""

    @abc.abstractmethod
    def gc(self, min_age: float | None = None, dry_run: bool = False,
           progress=None): ...

    @abc.abstractmethod
    async def destroy_async(self, soft: bool = True) -> int:
        """Destroy the store."""

    @abc.abstractmethod
    def destroy(self, soft: bool = True) -> int: ...


class Moves(Role, Protocol):
    """Moving shards between the Ray cluster's nodes. Sharded stores (it needs running
    Bookies)."""

    @abc.abstractmethod
    async def move_shard_async(self, shard: int, node_id: str) -> None:
        """Restart shard ``shard``'s Bookie on the Ray node ``node_id``."""

    @abc.abstractmethod
    def move_shard(self, shard: int, node_id: str) -> None: ...

    @abc.abstractmethod
    async def rebalance_async(self) -> list[dict]:
        """Move shards until the live nodes run as many each as can be; the moves made."""

    @abc.abstractmethod
    def rebalance(self) -> list[dict]: ...
