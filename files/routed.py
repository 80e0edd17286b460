"""A clone's object store: its own objects, plus read-only access to its ancestors' files.

A clone's manifest names the files it shares with an ancestor ``@<store_id>/<name>`` and maps
each ``store_id`` to that store's URL. :class:`RoutedStore` reads such names from the ancestor's
store and everything else from the clone's own. Files of an ancestor belong to the ancestor:
a clone never writes them, and "deleting" one (a merge or compaction replaced it) only means the
clone stops referencing it.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..options import Options
from .store import ObjectStore
from .sync import with_sync_twins


def foreign_name(store_id: str, name: str) -> str:
    """The name a clone gives a file of the store ``store_id`` (names that already point at
    an older ancestor stay as they are)."""
    return name if name.startswith("@") else f"@{store_id}/{name}"


def is_foreign(name: str) -> bool:
    return name.startswith("@")


@with_sync_twins
class RoutedStore:
    """The :class:`ObjectStore` interface over a clone's store and its ancestors' stores."""

    def __init__(self, base: ObjectStore, routes: tuple[tuple[str, str], ...],
                 options: Options):
        self.base = base
        self.routes = tuple(routes)
        self.options = options
        self._stores = {sid: ObjectStore.from_url(url, options) for sid, url in self.routes}

    def __reduce__(self):
        return (RoutedStore, (self.base, self.routes, self.options))

    def __getattr__(self, name):  # url, stats, config, list, ... are the clone's own
        return getattr(self.base, name)

    def _route(self, path: str) -> tuple[ObjectStore, str]:
        if not path.startswith("@"):
            return self.base, path
        sid, _, rest = path[1:].partition("/")
        store = self._stores.get(sid)
        if store is None:
            raise InvalidArgumentError(f"{path!r} names a store this clone does not know")
        return store, rest

    # -- reads go wherever the file lives --

    async def get_async(self, path):
        store, rest = self._route(path)
        return await store.get_async(rest)

    async def get_range_async(self, path, start, end):
        store, rest = self._route(path)
        return await store.get_range_async(rest, start, end)

    async def get_ranges_async(self, path, starts, ends):
        store, rest = self._route(path)
        return await store.get_ranges_async(rest, starts, ends)

    async def head_async(self, path):
        store, rest = self._route(path)
        return await store.head_async(rest)

    # -- writes only to the clone's own objects --

    def _own(self, path: str) -> str:
        if is_foreign(path):
            raise InvalidArgumentError(f"{path!r} belongs to an ancestor store: read-only")
        return path

    async def put_async(self, path, data):
        return await self.base.put_async(self._own(path), data)

    async def put_if_absent_async(self, path, data, **how):
        return await self.base.put_if_absent_async(self._own(path), data, **how)

    async def create_or_seal_async(self, path, data, seal, **how):
        return await self.base.create_or_seal_async(self._own(path), data, seal, **how)

    async def delete_async(self, path):
        if not is_foreign(path):  # an ancestor's file: the clone just stops referencing it
            await self.base.delete_async(path)



def store_for(base, routes, options: Options):
    """``base`` itself, or a :class:`RoutedStore` when the manifest names ancestors."""
    if isinstance(base, RoutedStore):
        base = base.base
    return RoutedStore(base, routes, options) if routes else base
