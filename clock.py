"""The one clock: every part of a store reads wall time through a :data:`Clock`, so that tests
advance time instead of sleeping (SlateDB threads a system clock through for the same reason).

A clock is any picklable callable that returns Unix seconds. :func:`system_clock` is the default.
:class:`ManualClock` is wall time plus an offset that a test moves forward; the offset lives in
a file, so every process on this machine that holds a copy (a store's Ray actors included)
reads the same time.

Durations (timeouts, latencies, backoff) are measured with ``time.monotonic`` and stay real:
only the time that is compared with stored times (TTL expiry, snapshot, checkpoint and lease
expiry, object ages) comes from the clock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
import time
from collections.abc import Callable

Clock = Callable[[], float]


def system_clock() -> float:
    """Wall time, in Unix seconds."""
    return time.time()


class ManualClock:
    """Wall time plus an offset that only :meth:`advance` moves, shared through a file by
    every process that holds a copy. For tests: a TTL, a snapshot timeout or GC's
    ``min_age`` passes at once, with no sleep."""

    def __init__(self, path: str | None = None):
        if path is None:
            fd, path = tempfile.mkstemp(prefix="lr-clock-")
            os.write(fd, b"0")
            os.close(fd)
            atexit.register(_remove, path)  # the creating process (a test run) owns the file
        self.path = path
        self._seen: tuple[tuple[int, int], float] = ((-1, -1), 0.0)  # (file identity, offset)

    def __reduce__(self):
        return (ManualClock, (self.path,))

    def offset(self) -> float:
        st = os.stat(self.path)
        identity = (st.st_ino, st.st_mtime_ns)  # each advance replaces the file
        if identity != self._seen[0]:
            with open(self.path) as f:
                self._seen = (identity, float(f.read() or 0))
        return self._seen[1]

    def __call__(self) -> float:
        return time.time() + self.offset()

    def advance(self, seconds: float) -> None:
        """Move this clock (and every copy of it) ``seconds`` forward."""
        new = self.offset() + seconds
        tmp = f"{self.path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(repr(new))
        os.replace(tmp, self.path)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
