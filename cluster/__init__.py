"""Sharded stores: one handle over N shards on N nodes of a Ray cluster.

Each shard is a complete store under its own prefix of the store's URL (see
:mod:`leveled_ray.manifest.shard_map`); the handle routes each key to its shard by a pure
function (:mod:`leveled_ray.codec.routing`) and talks to each shard's Bookie directly.
"""
