"""The commit point of a sharded backup: one record at the backup's root.

A backup of a sharded store copies every shard's journal files first, then creates
``backups/<n>`` (create-if-absent) naming each shard's next backup manifest, whole. Only then
are the shards' manifests written. So a backup interrupted before its record leaves every
shard at the previous backup; one interrupted after it is finished by whoever finds the record
(the next backup, or opening or administering the target): each shard whose newest manifest is
older than the record's gets the record's. A restore never mixes two backups' cuts.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from ..errors import CorruptObjectError
from ..files.store import ObjectStore
from .model import Manifest, decode, encode
from .shard_map import ShardMap

BACKUP_PREFIX = "backups/"
FORMAT = 1


def backup_record_name(number: int) -> str:
    return f"{BACKUP_PREFIX}{number:020d}"


@dataclass(frozen=True)
class BackupRecord:
    """One sharded backup: the layout, and each shard's manifest version and manifest."""

    shard_map: ShardMap
    versions: tuple[int, ...]
    manifests: tuple[Manifest, ...]

    def encode(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "shard_map": json.loads(self.shard_map.encode()),
            "shards": [{"version": v, "manifest": base64.b64encode(encode(m, v)).decode()}
                       for v, m in zip(self.versions, self.manifests)],
        }, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, name: str) -> BackupRecord:
        try:
            raw = json.loads(data)
            if raw["format"] != FORMAT:
                raise ValueError(f"format {raw['format']}")
            shard_map = ShardMap.decode(json.dumps(raw["shard_map"]).encode(), name)
            versions = tuple(int(s["version"]) for s in raw["shards"])
            manifests = tuple(decode(base64.b64decode(s["manifest"]), name, v)
                              for s, v in zip(raw["shards"], versions))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptObjectError(name, 0, f"damaged backup record: {exc}") from None
        if len(versions) != shard_map.count:
            raise CorruptObjectError(name, 0, "damaged backup record: one entry per shard")
        return cls(shard_map, versions, manifests)


async def newest_backup(root: ObjectStore) -> tuple[int, BackupRecord] | None:
    """The newest backup record at ``root`` and its number, or ``None``."""
    names = sorted(m.path for m in await root.list_async(BACKUP_PREFIX))
    if not names:
        return None
    name = names[-1]
    return int(name[len(BACKUP_PREFIX):]), BackupRecord.decode(await root.get_async(name), name)


async def create_backup_record(root: ObjectStore, number: int, record: BackupRecord) -> bool:
    """Create record ``number``; ``False`` if another backup created it first."""
    return await root.put_if_absent_async(backup_record_name(number), record.encode())
