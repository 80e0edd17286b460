"""``leveled-ray``: the command line for operators.

``get``, ``head``, ``keys``, ``buckets``, ``index``, ``inspect`` and ``export`` read the store
in this process (see :mod:`.reader`) and never disturb a running writer. ``checkpoint``, ``gc`` and
``destroy`` work on the URL's manifest, with or without the store running (see
:mod:`.admin`). ``put`` and ``delete`` go through a
running store when ``--name`` is given, and otherwise open the store at ``--url`` as its writer
for the one change (which fences any other writer of that store).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys

from .. import entry_points as face
from ..admin.progress import progress_bar
from ..bulk.export import export
from ..bulk.read import ReadQuery
from ..cluster.clone import create_any_clone
from ..cluster.store import ShardedStore
from ..codec import object_key
from ..codec.name_text import name_text
from ..codec.tictac import DEFAULT_SIZE
from ..errors import LeveledError
from ..files.sync import run_sync
from ..read.key_ranges import term_from_text
from . import stats as stats_view
from .args import (
    bad_input,
    checkpoint_row,
    default_url,
    human_size,
    name_arg,
    newest_reader,
    newest_readers,
    parse_options,
)
from .demo import run_demo
from .inspection import cmd_inspect, describe


def cmd_get(args) -> int:
    value = run_sync(newest_reader(args).get(object_key(name_arg(args.bucket), name_arg(args.key))))
    if value is None:
        print("not found", file=sys.stderr)
        return 1
    if args.out:
        with open(args.out, "wb") as f:
            f.write(value)
    else:
        sys.stdout.buffer.write(value)
        if sys.stdout.isatty():
            sys.stdout.write("\n")
    return 0


def cmd_head(args) -> int:
    head = run_sync(newest_reader(args).head(object_key(name_arg(args.bucket), name_arg(args.key))))
    if head is None:
        print("not found", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(head), default=str, indent=2))
    return 0


def _print_tuples(rows, as_json: bool) -> None:
    for row in rows:
        if as_json:
            print(json.dumps([name_text(r) if isinstance(r, bytes) else r for r in row]))
        else:
            print("\t".join(name_text(r) if isinstance(r, bytes) else str(r) for r in row))


def cmd_keys(args) -> int:
    bucket = None if args.bucket is None else name_arg(args.bucket)
    start = None if args.start is None else name_arg(args.start)
    end = None if args.end is None else name_arg(args.end)
    with newest_reader(args).fold_keys(bucket, start, end) as fold:
        _print_tuples(itertools.islice(fold, args.limit), args.json)
    return 0


def cmd_buckets(args) -> int:
    _print_tuples(([b] for b in newest_reader(args).list_buckets()), args.json)
    return 0


def cmd_index(args) -> int:
    start = term_from_text(args.field, args.start)
    end = start if args.end is None else term_from_text(args.field, args.end)
    with newest_reader(args).index_query(name_arg(args.bucket), args.field, start, end,
                                         return_terms=args.terms, term_regex=args.regex,
                                         max_results=args.limit) as found:
        _print_tuples(((r if args.terms else (r,)) for r in found), args.json)
    return 0


def _writer(args):
    if args.name:
        return face.connect(args.name), False
    return face.open(args.url, parse_options(args.option)), True


def cmd_put(args) -> int:
    if args.file:
        with open(args.file, "rb") as f:
            value = f.read()
    elif args.value is not None:
        value = args.value.encode()
    else:
        value = sys.stdin.buffer.read()
    store, owned = _writer(args)
    try:
        print(store.put(name_arg(args.bucket), name_arg(args.key), value, ttl=args.ttl))
    finally:
        if owned:
            store.close()
    return 0


def cmd_delete(args) -> int:
    store, owned = _writer(args)
    try:
        print(store.delete(name_arg(args.bucket), name_arg(args.key)))
    finally:
        if owned:
            store.close()
    return 0


def _print_rows(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))


def cmd_checkpoint(args) -> int:
    admin = face.admin(args.url, parse_options(args.option))
    if args.action == "create":
        rows = [checkpoint_row(admin.create_checkpoint(args.lifetime, args.name, args.source))]
    elif args.action == "list":
        rows = [checkpoint_row(c) for c in admin.list_checkpoints()]
    elif args.action == "refresh":
        rows = [checkpoint_row(admin.refresh_checkpoint(args.id, args.lifetime))]
    else:
        admin.delete_checkpoint(args.id)
        rows = [{"deleted": args.id}]
    _print_rows(rows, args.json)
    return 0


def cmd_gc(args) -> int:
    admin = face.admin(args.url, parse_options(args.option))
    plan = admin.gc(args.min_age, dry_run=args.dry_run, progress=progress_bar("deleting"))
    verb = "would delete" if args.dry_run else "deleted"
    done = plan.paths if args.dry_run else plan.deleted
    if args.json:
        print(json.dumps({verb.replace(" ", "_"): done, "failed": plan.failed,
                          "kept": plan.kept}, indent=2))
    else:
        print(f"{verb} {len(done)} object(s) of {len(plan.files)} file(s), "
              f"{len(plan.leases)} lease(s) and {len(plan.manifests)} manifest(s); kept: "
              + (", ".join(f"{n} {why}" for why, n in sorted(plan.kept.items())) or "nothing")
              + (f"; {len(plan.failed)} delete(s) failed, left for the next pass"
                 if plan.failed else ""))
        for path in done if args.verbose else []:
            print("  " + path)
    return 0


def cmd_destroy(args) -> int:
    deleted = face.admin(args.url, parse_options(args.option)).destroy(soft=not args.now)
    print(f"destroyed: {deleted} object(s) deleted" if args.now else
          "marked destroyed: the writer is fenced, and GC deletes everything after the grace "
          "period (gc.min_age_s) once no checkpoint is left")
    return 0


def cmd_clone(args) -> int:
    options = parse_options(args.option)
    run_sync(create_any_clone(args.url, args.target, args.checkpoint, options, None))
    print(f"cloned {args.url} to {args.target}" + (
        f" as of checkpoint {args.checkpoint}" if args.checkpoint else ""))
    return 0


def cmd_backup(args) -> int:
    if args.name:  # through the running store's Bookie
        done = face.connect(args.name).backup(args.target)
    else:  # on the URL, running or not: no Ray, and no writer is fenced
        done = face.admin(args.url, parse_options(args.option)).backup(
            args.target, progress=progress_bar("backup"))
    upto = (f"SQN {done['max_sqn']}" if "shards" not in done else
            "SQNs " + ", ".join(str(s["max_sqn"]) for s in done["shards"]) + " (per shard)")
    print(f"backed up {done['files']} journal file(s) ({done['copied']} copied, "
          f"{human_size(done['bytes'])}; {done['removed']} dropped), up to {upto}, "
          f"to {args.target}; open it to restore")
    return 0


def cmd_compare(args) -> int:
    found = face.compare(args.url, args.other, bucket=args.bucket, start_key=args.start_key,
                         end_key=args.end_key, size=args.size,
                         max_segments=args.max_segments, options=parse_options(args.option))
    if args.json:
        print(json.dumps({"differences": [{"bucket": name_text(d.bucket),
                                           "key": name_text(d.key), "kind": d.kind}
                                          for d in found.differences],
                          "rounds": found.rounds, "bytes_exchanged": found.bytes_exchanged,
                          "dirty_segments": found.dirty_segments}))
    else:
        for d in found.differences[:args.limit]:
            print(f"{d.kind:<13} {name_text(d.bucket)}\t{name_text(d.key)}")
        print(f"{len(found)} difference(s) in {found.dirty_segments} dirty segment(s); "
              f"{found.rounds} round(s), {human_size(found.bytes_exchanged)} exchanged")
    return 1 if found.differences else 0


def cmd_stats(args) -> int:
    if (args.watch is not None and not 0 < args.watch < math.inf) or (
            args.count is not None and args.count < 1):
        bad_input("--watch takes seconds above 0, --count a number of refreshes >= 1")
    if args.name:  # the running store's own figures, through Ray
        store = face.connect(args.name)
        gather = store.stats
        summarize = (stats_view.summarize_shards if isinstance(store, ShardedStore)
                     else stats_view.summarize)
    else:  # what the manifests say (each shard's, one row per shard)
        def gather():
            return [describe(reader) for reader in newest_readers(args)[0]]

        def summarize(now, _before, _seconds):
            if len(now) == 1:
                return stats_view.summarize_manifest(now[0])
            return {"source": "manifests (no running store asked)", "store": args.url,
                    "shards": {f"shard {i}": {
                        k: v for k, v in stats_view.summarize_manifest(info).items()
                        if k not in ("source", "store", "levels")} for i, info in enumerate(now)}}
    stats_view.show(gather, summarize, watch=args.watch, count=args.count, as_json=args.json,
                    human=human_size)
    return 0


def cmd_export(args) -> int:

    query = ReadQuery(bucket=None if args.bucket is None else name_arg(args.bucket),
                      start=None if args.start is None else name_arg(args.start),
                      end=None if args.end is None else name_arg(args.end),
                      with_indexes=args.with_indexes)
    done = export(args.url, args.to, options=parse_options(args.option),
                  checkpoint=args.checkpoint, query=query, splits=args.splits,
                  parallel=args.parallel, progress=progress_bar("exporting rows"))
    print(f"exported {done['rows']} row(s) in {done['files']} Parquet file(s) to {args.to} "
          f"(checkpoint {done['checkpoint']}, manifest {done['manifest_id']})")
    return 0


def cmd_demo(args) -> int:

    return run_demo(args.url, args.objects, args.value_bytes, parse_options(args.option),
                    shards=args.shards)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leveled-ray", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, fn, help_text, url=True):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if url:
            p.add_argument("--url", default=default_url(),
                           help="store URL: memory://name, file:///path or s3://bucket/prefix "
                                "(default: ./data)")
        p.add_argument("--option", action="append", metavar="NAME=VALUE",
                       help="an lr.Options setting, a group's as group.field, e.g. "
                            "--option object_store.s3_endpoint=http://127.0.0.1:9000")
        p.set_defaults(fn=fn)
        return p

    p = add("demo", cmd_demo, "load objects, read them back, restart the store, and summarise")
    p.add_argument("--objects", type=int, default=20_000)
    p.add_argument("--value-bytes", type=int, default=1024)
    p.add_argument("--shards", type=int, help="create a sharded store of this many shards "
                   "(a power of two; a sharded store at --url is reopened as one anyway)")
    for name, fn, text in (("get", cmd_get, "print an object's value (read-only)"),
                           ("head", cmd_head, "print an object's metadata (read-only)")):
        p = add(name, fn, text)
        p.add_argument("bucket")
        p.add_argument("key", help="a str key, or hex:... for bytes")
        if name == "get":
            p.add_argument("--out", help="write the value to this file")
    p = add("keys", cmd_keys, "list the live keys: every bucket, or one bucket from --start "
            "to --end (read-only)")
    p.add_argument("--bucket")
    p.add_argument("--start", help="first key (included)")
    p.add_argument("--end", help="last key (included)")
    p.add_argument("--limit", type=int, help="stop after this many")
    p.add_argument("--json", action="store_true", help="one JSON array per line")
    p = add("buckets", cmd_buckets, "list the buckets that hold live objects (read-only)")
    p.add_argument("--json", action="store_true")
    p = add("index", cmd_index, "query a secondary index: the keys whose FIELD holds a term "
            "from START to END (read-only)")
    p.add_argument("bucket")
    p.add_argument("field", help="an index field, ending in _bin (str terms) or _int")
    p.add_argument("start")
    p.add_argument("end", nargs="?", help="last term (default: START)")
    p.add_argument("--terms", action="store_true", help="print the term with each key")
    p.add_argument("--regex", help="keep terms matching this Python regex (_bin fields)")
    p.add_argument("--limit", type=int, help="stop after this many")
    p.add_argument("--json", action="store_true")
    p = add("put", cmd_put, "write an object (value from the argument, --file, or stdin)")
    p.add_argument("bucket")
    p.add_argument("key")
    p.add_argument("value", nargs="?")
    p.add_argument("--file")
    p.add_argument("--ttl", type=float)
    p.add_argument("--name", help="write through the running store of this name")
    p = add("delete", cmd_delete, "delete an object")
    p.add_argument("bucket")
    p.add_argument("key")
    p.add_argument("--name", help="delete through the running store of this name")
    p = add("inspect", cmd_inspect, "show the manifest, levels, journal files and sizes")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--files", action="store_true", help="list every SST and journal file")
    p.add_argument("--verify", action="store_true",
                   help="read and validate every file (checksums, structure)")
    p.add_argument("--checkpoints", action="store_true", help="list the checkpoints")
    p = add("checkpoint", cmd_checkpoint, "create, list, refresh or delete durable checkpoints "
            "(works with or without the store running)")
    p.add_argument("action", choices=["create", "list", "refresh", "delete"])
    p.add_argument("id", nargs="?", help="the checkpoint (refresh, delete)")
    p.add_argument("--lifetime", type=float, help="seconds until it expires (default: never)")
    p.add_argument("--name", help="a label (create)")
    p.add_argument("--source", help="pin this checkpoint's version instead (create)")
    p.add_argument("--json", action="store_true")
    p = add("gc", cmd_gc, "delete objects that no manifest, checkpoint or snapshot can read")
    p.add_argument("--min-age", type=float, help="seconds (default: gc.min_age_s)")
    p.add_argument("--dry-run", action="store_true", help="only report what would go")
    p.add_argument("--verbose", action="store_true", help="list every path")
    p.add_argument("--json", action="store_true")
    p = add("clone", cmd_clone, "create a writable clone of the store at --url (a retry "
            "finishes an interrupted one)")
    p.add_argument("target", help="the clone's store URL")
    p.add_argument("--checkpoint", help="clone as of this checkpoint (default: now)")
    p = add("backup", cmd_backup, "bring a backup of the Journal up to now: copy what the "
            "target lacks, drop what compaction dropped (opening the target restores the store)")
    p.add_argument("target", help="the backup's store URL")
    p.add_argument("--name", help="back up the running store of this name")
    p = add("compare", cmd_compare, "list the keys that differ between the store at --url "
            "and OTHER, by an exchange of tictac trees (read-only, without Ray); exit status 1 "
            "if any differ")
    p.add_argument("other", help="the other store's URL")
    p.add_argument("--size", default=DEFAULT_SIZE, help="tree size: xxsmall, xsmall, small, "
                                                    f"medium or large (default {DEFAULT_SIZE})")
    p.add_argument("--max-segments", type=int, default=256, help="segments per round")
    p.add_argument("--bucket", help="compare only this bucket (a range tree)")
    p.add_argument("--start-key", help="with --bucket: from this key (included)")
    p.add_argument("--end-key", help="with --bucket: to this key (included)")
    p.add_argument("--limit", type=int, help="print at most this many differences")
    p.add_argument("--json", action="store_true")
    p = add("stats", cmd_stats, "a store's figures (rates, latency, backlog, levels, caches, "
            "object-store requests, snapshots, checkpoints), refreshed with --watch")
    p.add_argument("--name", help="the running store of this name (else: what the manifest "
                                  "says)")
    p.add_argument("--watch", type=float, metavar="S", help="refresh every S seconds")
    p.add_argument("--count", type=int, metavar="N", help="stop after N refreshes")
    p.add_argument("--json", action="store_true", help="one JSON object per refresh")
    p = add("export", cmd_export, "write the objects of a checkpoint (default: a new one, "
            "released when done) as a directory of Parquet files (read-only)")
    p.add_argument("--to", required=True, help="an empty or new directory (or s3://... URI)")
    p.add_argument("--checkpoint", help="export this checkpoint's version")
    p.add_argument("--bucket")
    p.add_argument("--start", help="first key (included; needs --bucket)")
    p.add_argument("--end", help="last key (included; needs --bucket)")
    p.add_argument("--with-indexes", action="store_true", help="add the index terms column")
    p.add_argument("--splits", type=int, default=8, help="Parquet files to aim for")
    p.add_argument("--parallel", type=int, default=4, help="splits read at once")
    p = add("destroy", cmd_destroy, "mark the store destroyed (GC deletes it after a grace "
            "period), or --now delete everything at once")
    p.add_argument("--now", action="store_true",
                   help="delete everything now (refused while live checkpoints exist)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "action", None) in ("refresh", "delete") and not args.id:
        print(f"error: checkpoint {args.action} needs the checkpoint's id", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except LeveledError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def run() -> None:
    """The ``leveled-ray`` command: :func:`main`, then the process ends at once with its
    status, after Ray (if a verb started it) is shut down and the output flushed.

    Ending past Python's finalization is deliberate: the object store client's runtime
    threads (Rust) may touch Python objects as they wind down, and one that does so while
    the interpreter finalizes aborts the process (exit status 134) after the verb has done
    its work and printed its answer, about one run in ten on S3."""
    code = main()
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
