"""The journal's slot sequence in the store: the uncatalogued tail and what each slot holds."""

from __future__ import annotations

from ..errors import CorruptObjectError
from . import journal as jfmt
from .names import JOURNAL_PREFIX, journal_slot_name, journal_slot_of
from .store import ObjectStore


async def tail_slots(store: ObjectStore, next_slot: int) -> list[int]:
    """Slots at or after ``next_slot`` (the first one the manifest has not recorded)."""
    listed = await store.list_async(
        JOURNAL_PREFIX, offset=journal_slot_name(next_slot - 1) if next_slot else None
    )
    slots = (journal_slot_of(meta.path) for meta in listed)
    return sorted(s for s in slots if s is not None and s >= next_slot)


async def slot_info(store: ObjectStore, slot: int) -> jfmt.JournalInfo:
    """Read a slot's journal file and describe it (epoch, kind, SQN range)."""
    name = journal_slot_name(slot)
    data = await store.get_async(name)
    epoch, claimed, kind = jfmt.parse_header(data, name)
    if claimed != slot:
        raise CorruptObjectError(name, 0, f"file claims slot {claimed}")
    sqns = jfmt.parse_footer(len(data), data, name).sqns
    return jfmt.JournalInfo(name, slot, epoch, kind, len(data), len(sqns),
                            sqns[0] if sqns else 0, sqns[-1] if sqns else 0)
