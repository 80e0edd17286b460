"""The catalogue of ``make mutate``: single-point bugs at the protocols' decision points.

Each mutant replaces one exact piece of a product module (found exactly once) with a wrong
one. ``tests`` name the tests meant to catch it when the simulation does not (pytest node ids
relative to the repository root); ``equivalent`` explains a mutant that no check can catch
because it changes no outcome; ``unreached`` names a known survivor's missing scenario (it
still counts as survived).
"""

from __future__ import annotations

from typing import NamedTuple


class Mutant(NamedTuple):
    name: str
    path: str  # a product module, relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...] = ()
    equivalent: str = ""
    #: A known survivor: the path no check reaches yet, and what would reach it.
    unreached: str = ""


CROSS = "tests/cluster/test_sharded.py"
TXN_CRASH = "tests/cluster/test_txn_crashes.py"
HELD = "tests/actors/test_cut_holds_prepares.py"
CUTS = "tests/cluster/test_cut_protocol.py"
RESHAPE = "tests/cluster/test_reshape.py"
SPLIT = "tests/cluster/test_split.py"
FAILOVER = "tests/cluster/test_failover.py"
GC = "tests/admin/test_gc.py"
CHANGES = "tests/client/test_changes_ray.py"
TRANSITIONS = "tests/manifest"
TRANSACTIONS = "tests/client/test_transactions.py"
IN_FLIGHT = "tests/client/test_in_flight_reads.py"

MUTANTS = [
    # -- participant decisions (actors/participant.py) --
    Mutant("a resent prepare prepares again", "actors/participant.py",
           "        if txn in self.parts:\n            return self.parts[txn].number  # prepared",
           "        if False:\n            return self.parts[txn].number  # prepared",
           (HELD, TXN_CRASH)),
    Mutant("a busy key is not refused", "actors/participant.py",
           "                                [(c.lkey, c.extra) for c in changes if c.op == "
           "OP_RANGE]):",
           "                                [(c.lkey, c.extra) for c in changes if c.op == "
           "OP_RANGE]) and False:",
           (HELD, CROSS)),
    Mutant("a failed condition still prepares", "actors/participant.py",
           "            if failure is not None:\n                self.writes.unlock(txn)",
           "            if failure is not None and False:\n                self.writes.unlock(txn)",
           (CROSS,)),
    Mutant("a part written while its Bookie stopped is kept", "actors/participant.py",
           "        try:\n            self.writes.check_usable()\n        except LeveledError:",
           "        try:\n            pass\n        except LeveledError:",
           (HELD + "::test_a_part_that_lands_after_its_bookie_learned_it_was_fenced_is_refused",
            TXN_CRASH)),
    Mutant("an applied part is applied again after a restart", "actors/participant.py",
           "                elif (part.found or part.attempted) and applied_already(",
           "                elif False and applied_already(",
           (HELD, TXN_CRASH)),
    Mutant("a vanished commit record is an abort", "actors/participant.py",
           "self.counters[\"txn_record_gone\"] += 1\n            return COMMIT",
           "self.counters[\"txn_record_gone\"] += 1\n            return ABORT",
           (TXN_CRASH,),
           equivalent="a client deletes its record only once every part answered its commit, "
           "so a part whose record is gone is applied already (found again after a restart: "
           "applied_already) or being applied by its client's call, whose settling the "
           "shard's then joins (Participant._settle): either decision leaves the same data "
           "(the regression 'a record deleted during a settling' takes the path, and keeps "
           "every invariant with this mutant)"),
    Mutant("a commit of an unknown part answers nothing", "actors/participant.py",
           "            return self.applied_sqns.get(txn, [])",
           "            return []",
           (HELD, TXN_CRASH)),
    Mutant("a lower bulk part is not settled first", "actors/participant.py",
           "        for lower in settle_before(held, first_sqn):",
           "        for lower in settle_before(held, first_sqn)[:0]:",
           ("tests/bulk",)),
    # -- commit records (manifest/txn_records.py, cluster/txn.py) --
    Mutant("decide overwrites another decision", "manifest/txn_records.py",
           "    if await root.put_if_absent_async(name, encode_record(decision, numbers)):\n"
           "        return decision\n"
           "    return decode_record(await root.get_async(name), name)",
           "    await root.put_if_absent_async(name, encode_record(decision, numbers))\n"
           "    return decision",
           (TXN_CRASH,)),
    Mutant("applied_already ignores the part's first SQN", "manifest/txn_records.py",
           "any(s is not None and s >= part.after for s in newest)",
           "any(s is not None and s >= 0 for s in newest)",
           (TRANSITIONS, TXN_CRASH)),
    Mutant("settle_before takes parts above the write", "manifest/txn_records.py",
           "if p.first_sqn is not None and p.first_sqn < first_sqn]",
           "if p.first_sqn is not None and p.first_sqn <= first_sqn + 10**9]",
           ("tests/manifest/test_ingest.py", "tests/bulk")),
    Mutant("the client applies without deciding", "cluster/txn.py",
           "    if await decide(root, txn, COMMIT, numbers) != COMMIT:",
           "    if False:",
           (TXN_CRASH,)),
    Mutant("a busy answer is raised, not retried", "cluster/txn.py",
           "            if not _prepared(answer) and answer != BUSY:",
           "            if not _prepared(answer):",
           (CROSS,)),
    Mutant("prepared parts are not aborted on a failure", "cluster/txn.py",
           "        await _abort(shards, prepared, txn)\n        for answer in answers:",
           "        for answer in answers:",
           (CROSS, TXN_CRASH)),
    # -- the cut (cluster/cut.py) --
    Mutant("a cut that a shard outlasted is kept", "cluster/cut.py",
           "        if all(h is True for h in held):",
           "        if True:",
           (CUTS,)),
    Mutant("a cut does not apply the committed parts it holds", "cluster/cut.py",
           "            committed = {txn for txn, d in zip(pending, decisions) if d == COMMIT}",
           "            committed = set()",
           (CUTS,)),
    Mutant("a cut applies undecided parts", "cluster/cut.py",
           "            committed = {txn for txn, d in zip(pending, decisions) if d == COMMIT}",
           "            committed = set(pending)",
           (CUTS,)),
    # -- GC's guards (admin/gc.py, manifest/deletion.py) --
    Mutant("GC deletes despite a doubt", "manifest/deletion.py",
           "    if proof.doubts:\n        return []",
           "    if False:\n        return []",
           (GC,)),
    Mutant("GC deletes a prepared batch's files", "admin/gc.py",
           "        if path in known.prepared:",
           "        if False:",
           (GC, "tests/bulk")),
    Mutant("GC deletes the journal tail", "admin/gc.py",
           "        if slot is not None and slot >= manifest.journal_next_slot:",
           "        if False:",
           (GC,)),
    Mutant("GC deletes a snapshot's journal tail", "admin/gc.py",
           "        if slot is not None and any(first <= slot < end for first, end in tails):",
           "        if False:",
           (GC,)),
    Mutant("GC deletes young objects", "admin/gc.py",
           "        if now - meta.last_modified < min_age:\n            return \"young\"",
           "        if False:\n            return \"young\"",
           (GC,)),
    Mutant("GC deletes what a writer may still publish", "admin/gc.py",
           "            return \"its writer may publish it\"",
           "            return None",
           (GC,)),
    Mutant("GC deletes files referenced by a kept version", "admin/gc.py",
           "        if path in refs:\n            return \"referenced\"",
           "        if False:\n            return \"referenced\"",
           (GC,)),
    # -- listener positions (client/listen.py) --
    Mutant("a listener's position skips a change", "client/listen.py",
           "        self._read = int(rows.column(\"sqn\")[-1].as_py())",
           "        self._read = int(rows.column(\"sqn\")[-1].as_py()) + 1",
           (CHANGES, RESHAPE)),
    Mutant("a listener hands out a batch without moving", "client/listen.py",
           "        self.sqn = self._read  # the whole batch is handed out",
           "        pass  # the whole batch is handed out",
           (CHANGES,)),
    Mutant("a caught-up listener reads the Journal again forever", "client/listen.py",
           "                self._read = max(self._read, self._caught_up_to)",
           "                pass",
           (RESHAPE,)),
    Mutant("a lease does not hold history", "manifest/transitions.py",
           "    if held := [h.sqn for h in leases if h.sqn < history_sqn]:",
           "    if held := []:",
           (TRANSITIONS, CHANGES)),
    # -- split (cluster/split.py, cluster/quiet.py) --
    Mutant("a split does not look for parts after its claim", "cluster/split.py",
           "    await check_no_parts(Admin(parent_url, options), shard)\n    done(\"claim\")",
           "    done(\"claim\")",
           (SPLIT, "tests/bulk")),
    Mutant("a split ignores a live writer", "cluster/quiet.py",
           "            if lease.fresh(now):",
           "            if False:",
           (SPLIT, "tests/cluster/test_sharded_admin.py")),
    Mutant("a split's children lose the shard's leases", "cluster/split.py",
           "                           leases=True)",
           "                           leases=False)",
           (RESHAPE,)),
    Mutant("a retire ignores a newer writer", "manifest/transitions.py",
           "    if manifest.split_epoch == epoch:\n        return manifest  # an earlier",
           "    if True:\n        return manifest  # an earlier",
           (SPLIT, TRANSITIONS)),
    # -- a split or move through a running store's handle (cluster/reshape.py) --
    Mutant("a split that fails before its commit leaves the shard closed", "cluster/reshape.py",
           "                if layout.shard_map.prefixes[shard] in new_map.prefixes:  # before",
           "                if False:  # before",
           (RESHAPE,)),
    Mutant("a split's late commit is taken for a failure", "cluster/reshape.py",
           "                    except WrongShardError:\n",
           "                    except ZeroDivisionError:\n",
           (RESHAPE,),
           unreached="a split whose retire lands after its own failed step read the shard "
           "map, and before it reopens the shard: a request lost after landing at that very "
           "step; no seed in 200 and no test times one yet"),
    Mutant("a move opens the new Bookie before the old one closes", "cluster/reshape.py",
           "            await store.runtime.close_bookie(layout.stores[shard])\n"
           "            drop_group(store, prefix)\n",
           "            drop_group(store, prefix)\n",
           (RESHAPE,)),
    # -- a handle following a new layout (cluster/redirect.py) --
    Mutant("a handle does not wait for a shard being reshaped", "cluster/redirect.py",
           "        if now - at < CHANGE_WAIT_S:",
           "        if False:",
           (RESHAPE,)),
    Mutant("a call of unknown outcome is sent again", "cluster/redirect.py",
           "    return (isinstance(exc, StoreClosedError) and not isinstance(exc, "
           "StoreUnavailableError)",
           "    return (isinstance(exc, StoreClosedError)",
           (RESHAPE, CROSS)),
    # -- a Bookie restarted by Ray (actors/failover.py) --
    Mutant("a restarted Bookie answers before it has reopened", "actors/failover.py",
           "            await self.reopened()\n            return await getattr",
           "            return await getattr",
           (FAILOVER,)),
    Mutant("a restarted Bookie forgets the epoch it held", "actors/failover.py",
           "            self.bookie.lost_epoch = lost_epoch(actor)",
           "            self.bookie.lost_epoch = None",
           (FAILOVER,)),
    Mutant("a closed Bookie's restart holds calls for a start no one makes",
           "actors/failover.py",
           "            if actor.restarted():\n                self._ended = StoreClosedError(",
           "            if False:\n                self._ended = StoreClosedError(",
           (FAILOVER,)),
    Mutant("a Bookie that stood down answers as if it held the store", "actors/failover.py",
           "            if self._stood_down is not None:\n                raise",
           "            if False:\n                raise",
           (FAILOVER,)),
    # -- an error no caller sees (the "no call raises an untyped error" invariant) --
    Mutant("a background journal compaction fails untyped", "actors/inker.py",
           "        result = CompactionResult([])\n        while True:",
           "        result = CompactionResult([])\n        None.compact  # AttributeError\n"
           "        while True:"),
    # -- one identity per name (codec/keys.py) --
    Mutant("a bytes name is stored as its text", "codec/keys.py",
           '        return b"\\x01" + part.replace(b"\\x00", b"\\x00\\xff") + b"\\x00"',
           '        return b"\\x02" + part.replace(b"\\x00", b"\\x00\\xff") + b"\\x00"',
           ("tests/client/test_name_identity.py",)),
    # -- transactions (client/transaction.py, actors/write_path.py) --
    Mutant("a transaction's write does not carry its version", "client/transaction.py",
           "                change = change._replace(condition=self._condition(\n"
           "                    self._reads[lkey], len(changes), in_flight))",
           "                change = change",
           (TRANSACTIONS,)),
    Mutant("a serializable transaction's reads are not checked", "client/transaction.py",
           "        if self.isolation == SERIALIZABLE:\n            changes += [check_change(",
           "        if False:\n            changes += [check_change(",
           (TRANSACTIONS,)),
    Mutant("a transaction's check is written as a change", "codec/changes.py",
           "    return [c for c in changes if c.op < OP_CHECK]",
           "    return [c for c in changes if c.op != OP_RANGE]",
           (TRANSACTIONS,)),
    Mutant("commits that share a call are checked without those before them",
           "codec/conditions.py",
           "        shadow.update((c.lkey, change_entry(c, s, 0)) for s, c in enumerate(writes, "
           "sqn))",
           "        pass",
           (TRANSACTIONS,)),
    Mutant("a read of a write in flight that the Bookie does not know holds",
           "codec/conditions.py",
           "        part[index] = change._replace(condition=UNKNOWN_WRITE if sqn is None else sqn)",
           "        part[index] = change._replace(condition=NO_CONDITION if sqn is None else sqn)",
           ("tests/codec/test_conditions.py", IN_FLIGHT)),
    Mutant("a group that checked a failed write's key is written", "actors/group_commit.py",
           "        if touched.isdisjoint(group.keys) and touched.isdisjoint(group.checked):",
           "        if touched.isdisjoint(group.keys):",
           ("tests/actors/test_bookie_parts.py",)),
    Mutant("a transaction's checks in a shared call are written", "actors/write_path.py",
           "        changes, counts = without_checks(changes, counts)\n",
           "",
           (TRANSACTIONS,)),
    Mutant("a range check always holds", "actors/write_path.py",
           "        if range_digest(found) == (change.size, change.vhash):",
           "        if True:",
           (TRANSACTIONS,)),
    Mutant("a range check misses what is not yet durable", "actors/write_path.py",
           "            await asyncio.wait([last.future])  # so once these are durable",
           "            pass  # so once these are durable",
           ("tests/actors/test_write_faults.py::"
            "test_a_range_check_sees_a_write_into_its_range_that_is_not_yet_durable",
            TRANSACTIONS)),
    Mutant("a clean close leaves its parts unsettled", "actors/participant.py",
           "        self.closing = True\n        await self.prepares_done()",
           "        return\n        await self.prepares_done()",
           (HELD + "::test_a_clean_close_decides_and_settles_the_parts_it_holds",
            "tests/cluster/test_transfers.py")),
    Mutant("a shard that only checks is named in the commit record", "cluster/txn.py",
           "               if written(parts[s][0])}",
           "               if True}",
           (TRANSACTIONS,)),
    # -- backups (cluster/backup.py, admin/backup.py) --
    Mutant("a first backup leaves its target unmarked", "cluster/backup.py",
           '        await mark_unfinished(root, "backup")',
           "        pass",
           ("tests/cluster/test_sharded_admin.py",)),
    Mutant("a split child's backup copies its sibling's keys", "admin/backup.py",
           "    kept = [astuple(r) for r in records if owns.owns(r.lkey)]",
           "    kept = [astuple(r) for r in records]",
           ("tests/cluster/test_sharded_admin.py", "tests/admin/test_backup.py")),
    # -- damage (files/framing.py) --
    Mutant("a block's checksum is not checked", "files/framing.py",
           "    if xxhash.xxh3_64_intdigest(raw_block) != expected_sum:\n",
           "    if False:\n",
           ("tests/read/test_damaged_files.py",)),
    # -- replication (replication/actor.py) --
    Mutant("a replicator takes its source, spelled otherwise, for its target",
           "replication/actor.py",
           "    if same_store(target_url, source_url):",
           "    if target_url == source_url:",
           ("tests/replication/test_replication.py",)),
    # -- fencing and failover (manifest/transitions.py) --
    Mutant("fencing is off", "manifest/transitions.py",
           "    if manifest.writer_epoch != epoch:\n        raise FencedError(",
           "    if False:\n        raise FencedError(",
           (TRANSITIONS, FAILOVER)),
    Mutant("a failover claims a store someone else opened", "manifest/transitions.py",
           "    if manifest.writer_epoch != lost_epoch:",
           "    if False:",
           (TRANSITIONS, FAILOVER)),
    Mutant("a split shard still takes writes", "manifest/transitions.py",
           "    if manifest.split_epoch is not None:\n        raise WrongShardError(",
           "    if False:\n        raise WrongShardError(",
           (SPLIT, TRANSITIONS)),
    # -- replay: the Ledger's SQN only moves forward (manifest/transitions.py) --
    Mutant("the Ledger's SQN moves back", "manifest/transitions.py",
           "    if ledger_sqn <= manifest.ledger_sqn:\n        return manifest",
           "    if False:\n        return manifest",
           (TRANSITIONS,),
           equivalent="a persisted SQN set lower makes the next open replay more of the "
           "Journal, which it applies again by SQN: the same Ledger"),
]
