"""A plain progress line on stderr for long operator work (GC passes, backups)."""

from __future__ import annotations

import sys
import time


def progress_bar(label: str, stream=None):
    """A ``progress(done, total)`` callback that redraws ``label: done/total (n/s)`` at most
    ten times a second, and ends the line when ``done == total``."""
    out = stream or sys.stderr
    started = time.monotonic()
    last = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done < total and now - last < 0.1:
            return
        last = now
        rate = done / max(now - started, 1e-9)
        end = "\n" if done >= total else ""
        print(f"\r  {label}: {done}/{total} ({rate:,.0f}/s)", end=end, file=out, flush=True)

    return progress


def progress_of(progress, label: str):
    """The ``progress(done, total)`` callback an operation's ``progress`` argument asks for:
    ``True`` a :func:`progress_bar`, ``False``/``None`` none, or the caller's own function."""
    if progress is True:
        return progress_bar(label)
    return progress or None
