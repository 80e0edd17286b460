"""A sharded store's figures: the sum of its shards'."""

from __future__ import annotations

from collections.abc import Sequence


def totals(parts: Sequence[dict]) -> dict:
    """The sum of every number (not bools) found under the same keys in all of ``parts``,
    nested dicts summed alike; anything else is left to the per-shard entries."""
    out: dict = {}
    for key, first in parts[0].items():
        values = [part.get(key) for part in parts]
        if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
            out[key] = totals(values)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = sum(values)
    return out
