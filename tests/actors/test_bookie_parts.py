"""The Bookie's plain parts, without Ray: group commit, the Ledger cache and the reaper."""

import asyncio
from types import SimpleNamespace

import pytest

import leveled_ray as lr
from leveled_ray.actors.group_commit import Group, GroupCommit, JournalColumns, split_queue
from leveled_ray.actors.ledger_cache import LedgerCache
from leveled_ray.actors.reaper import Reaper
from leveled_ray.actors.remote import ValueBatch
from leveled_ray.actors.write_parts import WrittenBy, passed
from leveled_ray.codec import ACTIVE, LedgerEntry, LedgerRows, put_change
from leveled_ray.codec.conditions import Depends
from leveled_ray.errors import FencedError, InvalidArgumentError, ObjectStoreError
from leveled_ray.options import Options

OPTIONS = Options(journal=dict(flush_ms=0), object_store=dict(write_resolve_s=0.5))


def group(first: int, keys: list[bytes]) -> Group:
    sqns = range(first, first + len(keys))
    cols = JournalColumns(first, 0, (0,) * len(keys), tuple(keys), ((),) * len(keys),
                          (0,) * len(keys), (b"",) * len(keys))
    return Group(sqns, cols, ValueBatch(inline=[b"v"] * len(keys)), LedgerRows(), len(keys))


class Journal:
    """A fake Inker: each write takes the next outcome from ``outcomes`` ("ok", "fail",
    "unknown", "fenced"); ``settle`` answers with ``settled`` ("written" or "sealed")."""

    def __init__(self, outcomes, settled="written"):
        self.outcomes, self.settled, self.files = list(outcomes), settled, []

    async def append(self, records, values):
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        if outcome == "fail":
            raise ObjectStoreError("refused", definite=True)
        if outcome == "unknown":
            raise ObjectStoreError("no answer", definite=False)
        if outcome == "fenced":
            raise FencedError("newer writer", epoch=1, current_epoch=2)
        self.files.append([list(range(r.first_sqn, r.first_sqn + len(r.keys)))
                           for r in records])
        return len(self.files)

    async def settle(self):
        if self.settled == "sealed":
            raise ObjectStoreError("sealed", definite=True)
        self.files.append("settled")
        return len(self.files)


class Owner:
    """A write path that logs what the writer tells it."""

    closing = False

    def __init__(self, log: dict):
        self.log = log

    def durable(self, groups, info):
        self.log["durable"].extend(list(g.sqns) for g in groups)

    def release(self, group):
        self.log["released"].append(list(group.sqns))

    def stopped(self, exc):
        self.log["stopped"].append(exc)


def run_commit(journal: Journal, groups_of_keys, *, concurrent=True):
    """Queue the groups, run the writer until they are all answered; ``(results, log)``."""
    log = {"durable": [], "released": [], "stopped": []}

    async def main():
        writer = GroupCommit(OPTIONS, Owner(log))
        task = asyncio.ensure_future(writer.run(journal))
        groups, sqn = [], 1
        for keys in groups_of_keys:
            groups.append(group(sqn, keys))
            sqn += len(keys)
            writer.add(groups[-1])
            if not concurrent:
                await asyncio.wait([groups[-1].future])
        results = []
        for g in groups:
            try:
                results.append(await g.future)
            except Exception as exc:
                results.append(exc)
        await writer.wait_settled()
        task.cancel()
        return results, writer

    results, writer = asyncio.run(main())
    return results, log, writer


def test_queued_groups_share_a_journal_file_and_are_acknowledged_in_order():
    journal = Journal([])
    results, log, writer = run_commit(journal, [[b"a"], [b"b", b"c"], [b"d"]])
    assert results == [[1], [2, 3], [4]]
    assert log["durable"] == [[1], [2, 3], [4]]
    assert sum(len(f) for f in journal.files) == 3 and len(journal.files) < 3
    assert writer.counters["groups"] == len(journal.files)


def test_a_failed_write_fails_its_groups_and_the_queued_ones_on_their_keys():
    async def split():
        failed, dependent = group(1, [b"a"]), group(2, [b"a", b"z"])
        other, later = group(4, [b"b"]), group(5, [b"z"])
        keep, drop = split_queue([failed], [dependent, other, later])
        return keep == [other] and drop == [dependent, later]

    assert asyncio.run(split())  # z was touched by a dropped group, so "later" fails too

    async def checked():  # a group that only checked a failed group's key read that write
        failed, reader = group(1, [b"a"]), group(2, [b"b"])
        reader.checked = frozenset([b"a"])
        return split_queue([failed], [reader, group(3, [b"c"])])

    keep, drop = asyncio.run(checked())
    assert [g.keys for g in drop] == [(b"b",)] and [g.keys for g in keep] == [(b"c",)]
    results, log, _ = run_commit(Journal(["fail"]), [[b"a"], [b"b"]], concurrent=False)
    assert isinstance(results[0], ObjectStoreError) and results[0].definite
    assert results[1] == [2] and log["released"] == [[1]]


def test_an_unknown_outcome_is_settled_before_the_next_write():
    results, log, writer = run_commit(Journal(["unknown"]), [[b"a"]])
    assert isinstance(results[0], ObjectStoreError) and not results[0].definite
    assert log["durable"] == [[1]] and not writer.in_doubt  # settled: written after all
    results, log, _ = run_commit(Journal(["unknown"], settled="sealed"), [[b"a"]])
    assert log["durable"] == [] and log["released"] == [[1]]


def test_fencing_stops_every_queued_write():
    results, log, writer = run_commit(Journal(["fenced"]), [[b"a"], [b"b"]])
    assert all(isinstance(r, FencedError) for r in results)
    assert len(log["stopped"]) == 1 and not writer.queue


def entry(sqn: int) -> LedgerEntry:
    return LedgerEntry(sqn, ACTIVE, 0, 0, 1, 0, b"")


def rows(*pairs) -> LedgerRows:
    return LedgerRows.from_entries((k, entry(s)) for k, s in pairs)


def test_the_ledger_cache_sees_pending_then_durable_then_persisted():
    cache = LedgerCache(push_keys=2)
    cache.add_pending([b"k"], [entry(1)])
    assert cache.known_entry(b"k", {}).sqn == 1 and cache.get(b"k") is None  # not readable
    cache.add_pending([b"k"], [entry(2)])
    cache.release_pending([b"k"], [1])  # a later change to the key is still pending
    assert cache.known_entry(b"k", {}).sqn == 2
    cache.add_durable(rows((b"k", 2)))
    cache.release_pending([b"k"], [2])
    assert cache.get(b"k").sqn == 2 and not cache.pending and cache.backlog == 1
    assert not cache.wake_pusher.is_set()
    cache.add_durable(rows((b"m", 3)))
    assert cache.wake_pusher.is_set()  # push_keys reached
    sent = []

    async def send(batch, upto):
        sent.append((batch.num_rows, upto))

    asyncio.run(cache.push(lambda: 3, send))
    assert sent == [(2, 3)] and len(cache.overlay_batches()) == 1
    cache.drop_persisted(2)
    assert cache.get(b"k") is None and cache.get(b"m").sqn == 3 and cache.backlog == 1

def test_a_change_to_an_idle_pusher_starts_its_interval_and_does_not_push_alone():
    """The changes that follow one another within ``push_ms`` go to the Penciller together:
    the first change after an idle spell starts the pusher's interval, it does not push
    that change by itself (which cost a push, and its Arrow batch, per sequential put)."""
    cache, sent = LedgerCache(push_keys=3), []

    async def send(batch, upto):
        sent.append((batch.num_rows, upto))

    async def run():
        pusher = asyncio.create_task(cache.run_pusher(
            lambda: len(cache.unpushed), send, interval_s=3600, stopping=lambda: False))
        await asyncio.sleep(0)  # idle: it waits for a change
        for sqn in (1, 2, 3):
            cache.add_durable(rows((b"k%d" % sqn, sqn)))
            for _ in range(10):  # let the woken pusher run as far as it goes
                await asyncio.sleep(0)
        pusher.cancel()

    asyncio.run(run())
    assert sent == [(3, 3)]  # one push, when push_keys changes were waiting

    cache.drop_persisted(3)
    assert cache.backlog == 0 and cache.overlay_batches() == []


def test_backpressure_delays_writers_only_past_half_the_limit():
    cache = LedgerCache(push_keys=1000)
    options = Options(ledger=dict(max_unpersisted_keys=4, max_write_delay_ms=20))
    assert asyncio.run(cache.backpressure(options, lambda: False)) is None
    cache.add_durable(rows((b"a", 1), (b"b", 2), (b"c", 3)))
    waited = asyncio.run(cache.backpressure(options, lambda: False))
    assert waited is not None and waited >= 5  # half way between half and the limit


class Clerk:
    def __init__(self, kind, removed_in, fail=False):
        self.kind, self.removed_in, self.fail, self.deleted = kind, removed_in, fail, False
        self.name = f"{kind}/{id(self)}"

    async def delete(self):
        if self.fail:
            raise ObjectStoreError("503", definite=False)
        self.deleted = True


def test_the_reaper_deletes_only_what_the_owners_allow():
    old, new = Clerk("sst", 1), Clerk("journal", 2)
    broken, read = Clerk("sst", 1, fail=True), Clerk("sst", 3)
    clerks = [old, new, broken, read]
    host = SimpleNamespace(
        pending_deletes=lambda: [c for c in clerks if not c.deleted],
        readers_before=lambda version: version == 3)  # a read of an older view is running
    asked = []

    async def may_delete(kind, version):
        asked.append((kind, version))
        return kind == "sst"

    reaper = Reaper(host, may_delete)
    assert asyncio.run(reaper.sweep())
    assert old.deleted and not new.deleted and not broken.deleted and not read.deleted
    assert sorted(asked) == [("journal", 2), ("sst", 1)]  # one question per version
    assert reaper.counters == {"files_deleted": 1, "reaper_failures": 1, "reaper_sweeps": 1}


@pytest.mark.parametrize("answer", [False, RuntimeError("gone")])
def test_the_reaper_keeps_files_when_the_owner_says_no_or_is_gone(answer):
    clerk = Clerk("sst", 1)
    host = SimpleNamespace(pending_deletes=lambda: [clerk], readers_before=lambda v: False)

    async def may_delete(kind, version):
        if isinstance(answer, Exception):
            raise answer
        return answer

    reaper = Reaper(host, may_delete)
    assert not asyncio.run(reaper.sweep()) and not clerk.deleted
    assert reaper.counters["reaper_failures"] == (1 if isinstance(answer, Exception) else 0)


def test_only_the_parts_that_passed_are_written():
    failed = InvalidArgumentError("stands for a part's own failure")
    changes, values = passed(["a", "b1", "b2", "c"], [1, 2, 1], [None, failed, None],
                             ValueBatch(inline=[b"a", b"b1", b"b2", b"c"]))
    assert changes == ["a", "c"] and values.inline == [b"a", b"c"]
    with pytest.raises(InvalidArgumentError):  # values by reference come only as one part
        passed(["a", "b"], [1, 1], [None, failed], ValueBatch(ref=[object()]))


def test_the_bookie_remembers_what_recent_transaction_parts_wrote_by_token():
    """Each passed part's writes, by its token, for the parts that read them in flight; only
    the newest ``most`` parts are kept."""
    keys = [put_change("b", k, b"v", lr.Options(), 0.0)[0] for k in ("a", "b", "c")]
    written_by = WrittenBy(most=2)
    failed = InvalidArgumentError("its conditions failed")
    # Three parts from SQN 10: the second failed (left out of the changes), the third has
    # no token (a plain put).
    written_by.remember([keys[0], keys[1], keys[2]], [2, 1, 1], [None, failed, None],
                        [Depends(7), Depends(8), None], 10)
    assert (written_by(7, keys[0].lkey), written_by(7, keys[1].lkey)) == (10, 11)
    assert written_by(8, keys[0].lkey) is None and written_by(7, keys[2].lkey) is None
    written_by.remember(keys[:1], [1], [None], [Depends(9)], 20)
    written_by.remember(keys[:1], [1], [None], [Depends(10)], 21)
    assert written_by(7, keys[0].lkey) is None and written_by(10, keys[0].lkey) == 21
    assert written_by(9, keys[0].lkey) == 20
