"""What the simulation's clients did, and the invariants their outcomes must meet.

Every write is an :class:`Op` with a value of its own, so whatever a read or the change feed
shows names the write it came from. Most ops write keys no other op writes (*unique* ops):
then a read must show each one whole or not at all, and an acknowledged one always. Bulk
writes that contend write every key of :data:`SHARED_KEYS`, so the keys must all hold one
op's value: two bulk writes committed out of order must never mix.

A violated invariant is recorded, not raised, so a run reports all it found.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from leveled_ray.errors import (
    ConditionFailedError,
    ConflictError,
    InvalidArgumentError,
    ObjectStoreError,
)
from leveled_ray.manifest.ingest import IngestConflictError

SHARED_KEYS = [("shared", f"s{j}") for j in range(6)]
#: Errors after which a write surely did not happen ("nothing written").
DEFINITE = (ConditionFailedError, ConflictError, IngestConflictError, InvalidArgumentError)


def definite(exc: BaseException) -> bool:
    """Whether ``exc`` says its write surely did not happen."""
    return isinstance(exc, DEFINITE) or (isinstance(exc, ObjectStoreError) and exc.definite)


@dataclass
class Op:
    id: str
    kind: str
    keys: list
    value: bytes
    sent_at: float
    outcome: str = "pending"  # acked | failed | unknown
    acked_at: float | None = None
    error: str = ""

    @property
    def shared(self) -> bool:
        return self.keys is SHARED_KEYS


@dataclass
class Model:
    ops: list[Op] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    checks: Counter = field(default_factory=Counter)

    def new(self, kind: str, keys: list, value: str, now: float) -> Op:
        op = Op(value, kind, keys, value.encode(), now)
        self.ops.append(op)
        return op

    def ack(self, op: Op, now: float) -> None:
        op.outcome, op.acked_at = "acked", now

    def fail(self, op: Op, exc: BaseException) -> None:
        op.outcome = "failed" if definite(exc) else "unknown"
        op.error = f"{type(exc).__name__}: {exc}"[:200]

    def violated(self, invariant: str, detail: str) -> None:
        self.violations.append(f"{invariant}: {detail}")

    def unique(self) -> list[Op]:
        return [op for op in self.ops if not op.shared]

    # -- invariants --

    def check_whole(self, op: Op, values: list, where: str, sent_at: float,
                    atomic: bool = True) -> bool:
        """Nothing visible in part (unless ``atomic`` is false: a batched read holds a
        cross-shard ``put_many`` whole, not a bulk write, whose shards install one after the
        other); an op acknowledged before the read was sent is seen; a write that surely
        failed is never seen. Returns whether ``op`` is seen whole."""
        self.checks["whole"] += 1
        seen = {v == op.value for v in values}
        if len(seen) > 1 and atomic:
            self.violated("nothing visible in part", f"{where}: {op.id} ({op.kind}) is half "
                          f"visible: {values}")
        present = seen == {True}
        if not present and op.acked_at is not None and op.acked_at <= sent_at:
            self.violated("every acknowledged write is visible",
                          f"{where}: {op.id} ({op.kind}) acked at {op.acked_at:.3f}, not seen "
                          f"by a read sent at {sent_at:.3f}: {values}")
        if True in seen and op.outcome == "failed":
            self.violated("a refused write is never visible",
                          f"{where}: {op.id} ({op.kind}) failed with {op.error}, yet is seen")
        return present

    def check_cut(self, ops: list[Op], values: dict, where: str, sent_at: float) -> None:
        """Each op whole or not at all, and a later write only with every earlier one: of
        two ops where the first was acknowledged before the second was sent, a cut never
        holds the second without the first."""
        present = {op.id: self.check_whole(op, [values[k] for k in op.keys], where, sent_at)
                   for op in ops}
        self.checks["cut order"] += 1
        for later in ops:
            if not present[later.id]:
                continue
            for earlier in ops:
                if (earlier.acked_at is not None and earlier.acked_at < later.sent_at
                        and not present[earlier.id]):
                    self.violated("a cut holds a later write only with every earlier one",
                                  f"{where} holds {later.id} but not {earlier.id}, acked "
                                  "before it was sent")

    def check_past(self, ops: list[Op], values: dict, where: str, at: float,
                   epoch: float, skew_s: float = 0.0) -> None:
        """A view of the store as it was at time ``at``: each cross-shard ``put_many`` whole
        or not at all, and no write sent after ``at`` (to the millisecond: a change's
        ``last_modified`` is in milliseconds of the store's clock, ``epoch`` + virtual time,
        so a write sent later in ``at``'s millisecond counts as written by then), give or
        take ``skew_s``: a Bookie stamps its writes by its own clock, which is off by that
        much at most."""
        self.checks["past"] += 1
        for op in ops:
            seen = {values[k] == op.value for k in op.keys}
            if len(seen) > 1 and op.kind == "put_many":
                self.violated("nothing visible in part", f"{where}: {op.id} is half visible: "
                              f"{[values[k] for k in op.keys]}")
            if True in seen and int((epoch + op.sent_at) * 1000) > int((epoch + at + skew_s)
                                                                        * 1000):
                self.violated("a past view holds nothing sent after its time",
                              f"{where} holds {op.id}, sent at {op.sent_at:.4f}")

    def check_shared(self, values: list, where: str) -> None:
        """The shared keys hold one op's value, never a mix, and never a refused op's."""
        self.checks["shared"] += 1
        if len(set(values)) > 1:
            self.violated("contending bulk writes never mix",
                          f"{where}: shared keys hold {sorted(set(map(str, values)))}")
        by_value = {op.value: op for op in self.ops if op.shared}
        holder = by_value.get(values[0]) if values else None
        if holder is not None and holder.outcome == "failed":
            self.violated("a refused write is never visible",
                          f"{where}: shared keys hold {holder.id}, which failed with "
                          f"{holder.error}")
        if values and values[0] is None and any(o.outcome == "acked"
                                                for o in self.ops if o.shared):
            self.violated("every acknowledged write is visible",
                          f"{where}: shared keys hold nothing after an acked bulk write")

    def check_feed(self, changes: list, where: str) -> None:
        """Nothing applied twice: each op's changes appear at most once each in the feed,
        and a unique op's appear whole or not at all."""
        self.checks["feed"] += 1
        counts = Counter((c.bucket, c.key, c.value) for c in changes)
        twice = [k for k, n in counts.items() if n > 1]
        if twice:
            self.violated("nothing is applied twice", f"{where}: {len(twice)} changes appear "
                          f"more than once, e.g. {twice[:3]}")
        for op in self.unique():
            seen = sum(counts.get((b, k, op.value), 0) for b, k in op.keys)
            if seen not in (0, len(op.keys)) and not twice:
                self.violated("nothing visible in part", f"{where}: {seen} of {op.id}'s "
                              f"{len(op.keys)} changes are in the feed")
