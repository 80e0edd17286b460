"""The journal's slot sequence in the store: the uncatalogued tail and what each slot holds."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptObjectError, FencedError
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
                            int(sqns[0]) if len(sqns) else 0, int(sqns[-1]) if len(sqns) else 0)


async def write_fence(store: ObjectStore, epoch: int,
                      next_slot: int) -> tuple[jfmt.JournalInfo, list[jfmt.JournalInfo]]:
    """Claim the first free slot after the tail with an empty fence file of ``epoch``: an
    older writer's next journal write collides with it (or with a later slot of the tail).
    Returns the fence and the tail slots before it. ``FencedError`` if a slot already holds
    a file of ``epoch`` or newer."""
    slots = await tail_slots(store, next_slot)
    tail = [await slot_info(store, s) for s in slots]
    slot = (slots[-1] + 1) if slots else next_slot
    while True:
        name = journal_slot_name(slot)
        data, info = jfmt.build_journal(name, epoch, slot, [], kind=jfmt.KIND_FENCE)
        if await store.put_if_absent_async(name, data, ident=jfmt.IDENTITY_BYTES):
            return info, tail
        other = await slot_info(store, slot)
        if other.epoch >= epoch:
            raise FencedError(f"writer epoch {epoch} lost the journal to epoch {other.epoch}",
                              epoch=epoch, current_epoch=other.epoch)
        tail.append(other)  # an older writer's last group, written before our fence
        slot += 1


@dataclass
class UnsettledWrite:
    """A journal write whose outcome may not be known yet: its file, and the fence of the same
    epoch that seals its slot instead (built only if it is needed)."""

    slot: int
    data: bytes
    info: jfmt.JournalInfo
    epoch: int
    fence: tuple[bytes, jfmt.JournalInfo] | None = None

    def seal(self) -> bytes:
        if self.fence is None:
            self.fence = jfmt.build_journal(self.info.name, self.epoch, self.slot, [],
                                            kind=jfmt.KIND_FENCE)
        return self.fence[0]
