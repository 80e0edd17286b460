"""``leveled-ray inspect``: a store's manifest, levels, journal files and sizes, each shard's
for a sharded store, and with ``--verify`` every file read and validated."""

from __future__ import annotations

import json

from ..errors import LeveledError
from ..files import journal as jfmt
from ..files import sst as sfmt
from ..files.sync import run_sync
from ..read.store_reader import StoreReader
from .args import checkpoint_row, human_size, newest_readers


def describe(reader: StoreReader) -> dict:
    m = reader.manifest
    data_files = [j for j in list(m.journal) + reader.tail if j.kind == jfmt.KIND_DATA]
    return {
        "url": reader.store.url,
        "manifest_id": reader.manifest_id,
        "store_id": m.store_id,
        "writer_epoch": m.writer_epoch,
        "ledger_sqn": m.ledger_sqn,
        "max_sqn": max([m.ledger_sqn] + [j.max_sqn for j in data_files]),
        "levels": [
            {"level": i, "files": len(level), "bytes": sum(s.size for s in level),
             "entries": sum(s.entries for s in level),
             "tombstones": sum(s.tombstones for s in level)}
            for i, level in enumerate(m.levels)
        ],
        "journal": {
            "files": len(data_files), "bytes": sum(j.size for j in data_files),
            "entries": sum(j.entries for j in data_files),
            "uncatalogued": len(reader.tail), "next_slot": m.journal_next_slot,
            "fences": sum(1 for j in m.journal if j.kind == jfmt.KIND_FENCE),
        },
        "unpersisted_changes": len(reader.overlay),
        "checkpoints": len(m.checkpoints),
        "destroyed_at": m.destroyed_at,
    }


async def verify(reader: StoreReader) -> list[str]:
    """Read and validate every SST and journal file; returns the problems found."""
    problems = []
    for sst in reader.manifest.sst_files():
        try:
            sfmt.read_all(await reader.store.get_async(sst.name), sst.name)
        except LeveledError as exc:
            problems.append(str(exc))
    for info in reader.journal.files:
        try:
            jfmt.read_all(await reader.store.get_async(info.name), info.name)
        except LeveledError as exc:
            problems.append(str(exc))
    return problems


def cmd_inspect(args) -> int:
    readers, shard_map = newest_readers(args)
    if shard_map is None:
        return _inspect(readers[0], args)
    worst = 0
    for shard, reader in enumerate(readers):  # each shard is a store of its own
        if not args.json:
            print(f"== shard {shard} ({shard_map.prefixes[shard]}) ==")
        worst = max(worst, _inspect(reader, args))
    return worst


def _inspect(reader: StoreReader, args) -> int:
    info = describe(reader)
    if args.files:
        info["ssts"] = [
            {"level": i, "name": s.name, "bytes": s.size, "entries": s.entries,
             "min_sqn": s.min_sqn, "max_sqn": s.max_sqn}
            for i, level in enumerate(reader.manifest.levels) for s in level
        ]
        info["journal_files"] = [
            {"name": j.name, "bytes": j.size, "entries": j.entries, "min_sqn": j.min_sqn,
             "max_sqn": j.max_sqn}
            for j in reader.journal.files
        ]
    if args.checkpoints:
        info["checkpoint_list"] = [checkpoint_row(c) for c in reader.manifest.checkpoints]
    if args.verify:
        info["problems"] = run_sync(verify(reader))
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"store      {info['url']}  (id {info['store_id']})")
        print(f"manifest   {info['manifest_id']}   writer epoch {info['writer_epoch']}")
        print(f"SQN        ledger {info['ledger_sqn']}   journal {info['max_sqn']}   "
              f"unpersisted changes {info['unpersisted_changes']}")
        j = info["journal"]
        print(f"journal    {j['files']} files, {human_size(j['bytes'])}, {j['entries']} entries "
              f"({j['uncatalogued']} uncatalogued, {j['fences']} fences)")
        print("ledger     level  files      bytes    entries  tombstones")
        for lv in info["levels"]:
            print(f"           L{lv['level']:<5} {lv['files']:>5} {human_size(lv['bytes']):>10} "
                  f"{lv['entries']:>10} {lv['tombstones']:>11}")
        for row in info.get("ssts", []):
            print(f"  L{row['level']} {row['name']}  {human_size(row['bytes'])}  {row['entries']} "
                  f"entries  SQN {row['min_sqn']}..{row['max_sqn']}")
        for row in info.get("checkpoint_list", []):
            print(f"  checkpoint {row['id']}  pins manifest {row['manifest_id']}  "
                  f"name={row['name']}  expires_at={row['expires_at']}")
        for row in info.get("journal_files", []):
            print(f"  {row['name']}  {human_size(row['bytes'])}  {row['entries']} entries  "
                  f"SQN {row['min_sqn']}..{row['max_sqn']}")
        if args.verify:
            print("verify     " + ("ok" if not info["problems"] else
                                   f"{len(info['problems'])} problem(s)"))
            for p in info["problems"]:
                print("  " + p)
    return 1 if args.verify and info["problems"] else 0
