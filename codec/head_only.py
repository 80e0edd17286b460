"""``head_only`` stores (leveled's head-only mode): small values kept in the Ledger.

A store opened with ``head_only="with_lookup"`` or ``"no_lookup"`` keeps each object's value in
its Ledger entry, beside its metadata. The Journal still makes each ``put_many`` durable, but a
journal file whose entries are all persisted in the Ledger is deleted (``trim_journal``), so
such a store costs the Ledger and little more. ``get`` is refused (read values with ``head``
or ``fold_heads``); with ``no_lookup`` only folds read the store, as in leveled. The mode is
fixed when the store is created: opening it in another mode is refused.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .changes import OP_PUT, Change
from .entries import pack_extra

WITH_LOOKUP = "with_lookup"
NO_LOOKUP = "no_lookup"
MODES = (WITH_LOOKUP, NO_LOOKUP)
#: The manifest setting that records the mode.
SETTING = "head_only"


def check_mode(mode) -> str | None:
    if mode is not None and mode not in MODES:
        raise InvalidArgumentError(f"head_only must be None or one of {MODES}, not {mode!r}")
    return mode


def check_store_mode(requested: str | None, stored: str | None, url: str) -> None:
    """Refuse to open a store in a mode other than the one it was created with."""
    if requested != stored:
        raise InvalidArgumentError(
            f"the store at {url} was created with head_only={stored!r}; it cannot be opened "
            f"with head_only={requested!r} (one store, one mode)")


def ledger_change(change: Change, value: bytes | None, max_bytes: int) -> Change:
    """A change for a head_only store: the value goes into the Ledger entry too."""
    if change.indexes:
        raise InvalidArgumentError("head_only stores keep no index entries")
    if change.op != OP_PUT:
        return change
    if len(value) > max_bytes:
        raise InvalidArgumentError(f"value is {len(value)} bytes, over the head_only limit "
                                   f"max_head_only_value_bytes={max_bytes}")
    return change._replace(extra=pack_extra(change.extra, (), value))


def refuse_fold(mode: str | None, kind: str) -> None:
    """:func:`refuse` for a fold of ``kind`` (``"keys"``, ``"heads"``, ``"objects"``,
    ``"index"``)."""
    refuse(mode, {"objects": "fold_objects", "index": "index_query"}.get(kind, "fold"))


def refuse(mode: str | None, what: str) -> None:
    """Raise for reads a head_only store cannot answer: ``get`` (values), ``head`` (lookups
    with ``no_lookup``), ``fold_objects`` and ``index_query``."""
    if mode is None:
        return
    if what in ("get", "fold_objects"):
        raise InvalidArgumentError(f"{what} is not available on a head_only store: its values "
                                   "live in the Ledger (use head or fold_heads)")
    if what == "index_query":
        raise InvalidArgumentError("head_only stores keep no index entries")
    if what == "head" and mode == NO_LOOKUP:
        raise InvalidArgumentError("a head_only='no_lookup' store answers folds only "
                                   "(fold_heads, fold_keys)")
