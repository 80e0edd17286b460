"""Which streaming-write commit records GC may delete (pure)."""

from leveled_ray.manifest.txn_records import (
    claim_name,
    record_name,
    stream_txn,
    unneeded_stream_records,
)


def test_only_a_writers_superseded_batches_go_and_never_one_a_part_waits_on():
    old, held, newest = stream_txn("w", 4, 0), stream_txn("w", 5, 0), stream_txn("w", 6, 1)
    other = stream_txn("another writer", 1, 0)
    paths = [record_name(t) for t in (old, held, newest, other)] + [
        claim_name(t) for t in (old, held, newest, other)] + ["txn/01J0000000000000000000000A"]
    assert sorted(unneeded_stream_records(paths, held={held})) == sorted(
        [record_name(old), claim_name(old)])
    assert unneeded_stream_records(paths[:1], held=set()) == []  # a writer's newest stays


def test_names_are_safe_and_distinct_for_any_writer_text():
    names = {stream_txn(w, b, a) for w in ("w", "W", "a/b c", "ü") for b in (0, 1)
             for a in (0, 1)}
    assert len(names) == 16
    assert all(n.replace(".", "").isalnum() and n.isascii() for n in names)
