"""Calls under way in one actor, and a wait until none is: a close waits for the write calls
it took to answer, a cut for the prepares it must see."""

from __future__ import annotations

import asyncio
import contextlib


class InFlight:
    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def one(self):
        """One call under way for the block's length."""
        self.count += 1
        self._none.clear()
        try:
            yield
        finally:
            self.count -= 1
            if not self.count:
                self._none.set()

    async def none(self) -> None:
        """Wait until no call is under way (a call that begins meanwhile is waited for too)."""
        while self.count:
            await self._none.wait()
