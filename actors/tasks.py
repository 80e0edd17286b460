"""Background tasks of one actor: each is kept referenced until it ends (asyncio holds tasks only
weakly), and an error it ends with is logged and counted, never swallowed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


class Tasks:
    def __init__(self, owner: str):
        self.owner = owner
        self.running: set[asyncio.Task] = set()
        self.errors = 0
        self.last_error: str | None = None

    def start(self, coro, what: str) -> asyncio.Task:
        """Run ``coro`` as a task named ``what``."""
        task = asyncio.ensure_future(coro)
        self.running.add(task)
        task.add_done_callback(lambda t: self._done(t, what))
        return task

    def _done(self, task: asyncio.Task, what: str) -> None:
        self.running.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        self.errors += 1
        self.last_error = f"{what}: {task.exception()!r}"
        log.warning("%s: %s failed in the background: %r", self.owner, what, task.exception())

    async def cancel(self, *tasks: asyncio.Task) -> None:
        """Cancel ``tasks`` and wait for them to end."""
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def watch(wait: Callable[[], Awaitable], adopt: Callable[[Any], None],
                failed: Callable[[BaseException], None]) -> None:
    """Adopt each new value that ``wait()`` returns (``None``: nothing new) until it fails;
    ``failed`` learns why (the owner it long-polls is gone)."""
    while True:
        try:
            value = await wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed(exc)
            return
        if value is not None:
            adopt(value)
