"""A checker of transaction histories, after Elle (Kingsbury and Alvaro, 2020).

Each transaction reads registers and writes some of the ones it read (read-modify-write),
with a value no other transaction writes: so a value read names the transaction that wrote
it, and the version order of a key follows from the writes themselves (each new version's
writer read the version before it). From a history of committed transactions it builds the
dependency graph (Adya's):

* ``wr``: T1 wrote the version T2 read;
* ``ww``: T1 wrote the version just before T2's;
* ``rw``: T1 read the version just before the one T2 wrote (an anti-dependency).

``serializable`` forbids every cycle. ``snapshot`` isolation forbids cycles of ``wr`` and
``ww`` edges and cycles with exactly one ``rw`` edge (read skew, G-single); it allows write
skew (cycles of two or more ``rw`` edges). Both forbid a lost update (two committed
transactions that wrote over the same version), a read of a version no committed transaction
wrote (an aborted or unknown one: then it committed after all, see below), and a read of a
value never written.

A transaction whose outcome its client never learnt counts as committed if anyone read what
it wrote, and as aborted otherwise: either, never both. A read of a write still in flight (a
transaction of the same process reads a commit's writes before that commit answered) proves
nothing by itself: the write may still fail, and its reader with it. It counts only once its
reader counts as committed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

#: The writer of every key's first version.
INITIAL = "init"
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass
class Txn:
    """One transaction as its client saw it: what it read (key -> the id of the transaction
    whose version it saw), what it wrote (keys, each over the version it read), its end."""

    id: str
    reads: dict = field(default_factory=dict)
    writes: tuple = ()
    outcome: str = UNKNOWN
    #: The keys it read from writes still in flight.
    in_flight: frozenset = frozenset()


def committed_of(history: list[Txn], aborted_readers: bool = False) -> set[str]:
    """The ids of the transactions that count as committed: those whose client learnt so, and
    those whose outcome it never learnt but whose writes were read, from the store (by a
    transaction that did not abort, or by any with ``aborted_readers``) or in flight by one
    that counts as committed."""
    committed = {t.id for t in history if t.outcome == COMMITTED}
    unknown = {t.id for t in history if t.outcome == UNKNOWN}
    while True:
        more = {writer for t in history for key, writer in t.reads.items()
                if writer in unknown and writer not in committed
                and (t.id in committed if key in t.in_flight
                     else aborted_readers or t.outcome != ABORTED)}
        if not more:
            return committed
        committed |= more


def anomalies(history: list[Txn], isolation: str = "serializable") -> list[str]:
    """What ``history`` shows that ``isolation`` forbids (``[]``: nothing)."""
    found: list[str] = []
    by_id = {t.id: t for t in history}
    committed = committed_of(history)
    for t in history:
        if t.outcome == COMMITTED or t.id in committed:
            for key, writer in t.reads.items():
                if writer == INITIAL or writer in committed:
                    continue
                kind = "an aborted" if writer in by_id else "a never written"
                found.append(f"{t.id} read {key} from {kind} transaction {writer}")
    edges: dict[str, set] = defaultdict(set)  # (to, kind) pairs from each transaction
    next_of: dict[tuple, str] = {}  # (key, writer of a version) -> writer of the next one
    for tid in sorted(committed):
        t = by_id[tid]
        for key in t.writes:
            before = t.reads.get(key)
            if before is None:
                found.append(f"{tid} wrote {key} without reading it (unchecked)")
                continue
            other = next_of.setdefault((key, before), tid)
            if other != tid:
                found.append(f"lost update of {key}: {other} and {tid} both wrote over "
                             f"{before}'s version")
            if before != INITIAL:
                edges[before].add((tid, "ww"))
    for tid in committed:
        for key, writer in by_id[tid].reads.items():
            if writer != INITIAL and writer != tid:
                edges[writer].add((tid, "wr"))
            after = next_of.get((key, writer))
            if after is not None and after != tid:
                edges[tid].add((after, "rw"))
    found += _cycles(edges, committed, isolation)
    return found


def _cycles(edges: dict, nodes: set, isolation: str) -> list[str]:
    """The forbidden cycles, one example each: any cycle (serializable), or a cycle with no
    or exactly one ``rw`` edge (snapshot)."""
    def reach(start: str, goal: str, kinds: set) -> list[str] | None:
        """A path from ``start`` to ``goal`` over edges of ``kinds``, or ``None``."""
        came: dict[str, str] = {start: start}
        todo = [start]
        while todo:
            node = todo.pop()
            for to, kind in edges.get(node, ()):
                if kind in kinds and to not in came:
                    came[to] = node
                    if to == goal:
                        path = [to]
                        while path[-1] != start:
                            path.append(came[path[-1]])
                        return path[::-1]
                    todo.append(to)
        return None

    found = []
    kinds = {"wr", "ww", "rw"} if isolation == "serializable" else {"wr", "ww"}
    for a in sorted(nodes):
        for b, kind in sorted(edges.get(a, ())):
            if isolation != "serializable" and kind == "rw":
                path = reach(b, a, {"wr", "ww"})  # one rw edge closes it: G-single
            elif kind in kinds:
                path = reach(b, a, kinds)
            else:
                continue
            if path is not None:
                found.append(f"cycle ({isolation}): {a} -{kind}-> " + " -> ".join(path))
                return found  # one example is enough
    return found
