"""What every verb of the command line shares: the default URL, ``--option`` pairs, bad input
(exit status 2), ``hex:`` names, and readers of a store's newest manifests without Ray."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from ..cluster.reader import ShardsAsTheyAre
from ..codec.name_text import name_from_text
from ..errors import InvalidArgumentError
from ..files.store import ObjectStore
from ..files.sync import run_sync
from ..manifest.shard_map import ShardMap, read_shard_map
from ..options import Options
from ..read.store_reader import StoreReader


def default_url() -> str:
    return "file://" + os.path.abspath("data")


def parse_options(pairs: list[str]) -> Options:
    """``--option name=value`` pairs into :class:`Options`."""
    values = {}
    for pair in pairs or []:
        name, sep, raw = pair.partition("=")
        if not sep:
            bad_input(f"--option takes name=value with a name from lr.Options "
                       f"(group.field for a group's): {pair!r}")
        values[name] = raw
    try:
        return Options.from_text(values)
    except InvalidArgumentError as exc:
        bad_input(f"--option: {exc}")


def bad_input(message: str) -> NoReturn:
    """Bad input on the command line: the message, and exit status 2 (as argparse's)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def name_arg(text: str) -> str | bytes:
    """Buckets and keys are str; ``hex:...`` gives bytes (see
    :mod:`~leveled_ray.codec.name_text`, the form the command line shows names in)."""
    try:
        return name_from_text(text)
    except InvalidArgumentError as exc:
        bad_input(str(exc))


def newest_readers(args) -> tuple[list[StoreReader], ShardMap | None]:
    """A reader of each shard's newest manifest (one, of a plain store), and the shard map."""
    options = parse_options(args.option)
    shard_map = run_sync(read_shard_map(ObjectStore.from_url(args.url, options)))
    urls = [args.url] if shard_map is None else [shard_map.shard_url(args.url, s)
                                                 for s in range(shard_map.count)]
    return [run_sync(StoreReader.open(ObjectStore.from_url(url, options), options))
            for url in urls], shard_map


def newest_reader(args):
    """The store at ``--url`` as its newest manifests say, plain or sharded."""
    readers, shard_map = newest_readers(args)
    return readers[0] if shard_map is None else ShardsAsTheyAre(readers, shard_map)


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def checkpoint_row(c) -> dict:
    return {"id": c.id, "manifest_id": c.manifest_id, "name": c.name,
            "created_at": c.created_at, "expires_at": c.expires_at}
