"""Which actor runs a Bookie opened under a name.

A Bookie is a named Ray actor, and handles find a store, or a shard, by that name. A move
starts the shard's new Bookie before it closes the old one, which still holds the name, so the
new one runs under a name of its own (:func:`moved`), and Ray's key-value store maps the
shard's name to it once it has opened the store (:func:`point`). Every lookup by name goes
through :func:`resolve`; closing the store drops the mapping (:func:`forget`).
"""

from __future__ import annotations

import uuid


def _key(name: str) -> bytes:
    return f"leveled/actor_name/{name}".encode()


def moved(name: str) -> str:
    """A new actor name for a Bookie that will take over from the one named ``name``."""
    return f"{name}~{uuid.uuid4().hex[:8]}"


def resolve(name: str) -> str:
    """The name of the actor that runs the Bookie named ``name`` now (``name`` itself unless
    a move gave it another)."""
    from ray.experimental import internal_kv

    found = internal_kv._internal_kv_get(_key(name))
    return name if found is None else found.decode()


def point(name: str, actor_name: str) -> None:
    """The Bookie named ``name`` runs as ``actor_name`` from now on."""
    from ray.experimental import internal_kv

    if actor_name == name:
        internal_kv._internal_kv_del(_key(name))
    else:
        internal_kv._internal_kv_put(_key(name), actor_name.encode(), overwrite=True)


def forget(name: str) -> None:
    """Drop what :func:`point` kept for ``name`` (its store is closed)."""
    point(name, name)
