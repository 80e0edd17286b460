"""What shows that a regression of the simulation took its bug's path (see
``test_simulation.REGRESSIONS``): a check its run counts, a counter of the product's (summed
over the run's Bookie processes: ``World.counters``), a predicate on its report, or a call of
the product's seen by a :class:`Spy`."""

import dataclasses
import inspect
from collections.abc import Callable

from leveled_ray.actors import participant
from leveled_ray.actors.bookie_shard_calls import ShardCalls
from leveled_ray.bulk import sharded as bulk_sharded
from leveled_ray.bulk import write as bulk_write
from leveled_ray.client.calls import Call
from leveled_ray.cluster import past
from leveled_ray.errors import LeveledError
from leveled_ray.manifest import ingest as ingest_rules
from leveled_ray.manifest.ingest import IngestConflictError
from leveled_ray.manifest.txn_records import COMMIT


@dataclasses.dataclass(frozen=True)
class Spy:
    """A call of the product's that shows a path was taken: ``owner.attribute`` raised
    ``raised``, or returned a value for which ``returned(value, args)`` is true."""

    owner: object
    attribute: str
    raised: type[BaseException] | tuple = ()
    returned: Callable | None = None

    def install(self, monkeypatch) -> list:
        """Wrap the call for the test; returns the list of what showed the path."""
        seen: list = []
        original = getattr(self.owner, self.attribute)

        def check(out, args):
            if self.returned is not None and self.returned(out, args):
                seen.append(out)
            return out

        if inspect.iscoroutinefunction(original):
            async def wrapped(*args, **kwargs):
                try:
                    return check(await original(*args, **kwargs), args)
                except self.raised as exc:
                    seen.append(exc)
                    raise
        else:
            def wrapped(*args, **kwargs):
                try:
                    return check(original(*args, **kwargs), args)
                except self.raised as exc:
                    seen.append(exc)
                    raise
        monkeypatch.setattr(self.owner, self.attribute, wrapped)
        return seen


#: What shows that a regression's run took its bug's path: a check the run counts, a counter
#: of the product's (summed over its Bookie processes), or a :class:`Spy`. (The path of "a
#: committed part installed past its window" came up in 4 of 10 000 seeds, and now in none of
#: 2 000 near its seed: tests/bulk/test_sharded_bulk.py takes it in every run, and counts it.)
PATHS = {
    "a transaction that only reads on a shard": "shift changes committed",
    "a split's children cutting their shared history apart": Spy(
        past, "one_history", returned=lambda out, args: out != list(args[0])),
    "a past view and a batch applied apart": Spy(
        past, "whole_batches", returned=lambda out, args: out[0] != list(args[0])),
    "a record deleted during a settling": "participant.txn_record_gone",
    "a write waiting when its Bookie closed": "writes.refused_while_waiting",
    "a part that lands late": "participant.txn_swept",
    "a close that was not delivered": Spy(Call, "_closes_again",
                                          returned=lambda out, args: out),
    "listener position": "listener",  # a listener was stopped, resumed and compared
    "stream batch sent again": Spy(ingest_rules, "applied", returned=lambda out, args: out),
    "bulk windows in opposite orders": Spy(bulk_sharded, "begin_shards",
                                           raised=bulk_write.WindowTaken),
    "an aborted batch's record and a late commit": Spy(
        bulk_sharded, "decide", returned=lambda out, args: args[2] == COMMIT != out),
    "prepare during an install": Spy(participant, "check_install_order",
                                     raised=IngestConflictError),
    "bulk writes out of order": Spy(participant, "settle_before",
                                    returned=lambda out, args: bool(out)),
    "an abort after a commit whose install lands late": Spy(
        bulk_write, "committing", returned=lambda out, args: out),
    "a failed bulk install and min_age=0": Spy(ShardCalls, "_install_files",
                                               raised=LeveledError),
    "a move beside a split": lambda report: report.checks.get("moves done") and any(
        report.checks.get(k) for k in ("splits done, split", "splits killed, split")),
}
#: Regressions whose path nothing above shows yet: a view at a past time resolved past a bulk
#: write's reserved SQNs, or looking for a batch across a split's children (pure rules in
#: read/history_view.py and manifest/batch_tags.py, each with its own tests); a shared file
#: load whose reader was cancelled (files/clerk.py); GC with min_age=0 and a closed lease's
#: pending bulk write; a committed part installed past its window (see above); a write held
#: by a bulk install under a cut (WritePath._admits), which no seed near its own takes now; a
#: part that lands after its Bookie stopped (``participant.txn_refused_stopped``): a clean
#: close now waits for the prepares under way, so only a Bookie fenced during the part's
#: upload takes that path, which tests/actors/test_cut_holds_prepares.py makes; a split's
#: retire that lands after its failed step read the shard map (``reshape._start`` raising
#: ``WrongShardError``): none of 2 900 seeds of their own configs, or 1 500 of one with faults
#: and two splits, takes it now (the mutant "a split's late commit is taken for a failure"
#: survives for it).
UNPROBED = {"a part prepared as its Bookie closed", "a split's commit that landed late",
            "a past view and a later write",
            "a past view across a split", "a child that read its whole history before its sibling",
            "a part's start that only one child held", "a shared load whose reader was cancelled",
            "a bulk write's files and min_age=0", "a committed part installed past its window",
            "a write during a bulk install"}
